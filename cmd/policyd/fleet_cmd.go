package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

const fleetUsage = `Usage: policyd fleet list  [flags] [--provider P] [--model M]
       policyd fleet get   [flags] BUCKET
       policyd fleet clear [flags] [--tenant T] [--hold] [--stop] [--breaker] [--pace] [--reason TEXT] BUCKET

Shows and clears a running daemon's fleet memory (FleetService), as JSON.
BUCKET is a name as decisions show it, e.g. availability:openai/gpt-4o or
rate_limit:openai/gpt-4o@prod-key. list pages through every bucket of the
caller's tenant.

clear ends a bucket's shared cooldown (--hold), fleet stop (--stop), breaker
(--breaker: it closes, without a slow start) or learnt pace (--pace: the
request limit and pacing's cut are forgotten); none of them clears all four.
It reaches every replica and is journaled as a fleet_clear event with the
caller's identity and address. With authentication on, only callers of the
daemon's --admin-tenants may clear, any tenant's bucket (--tenant; default
the caller's own).
`

// fleetFlags are the connection flags of the commands that call a running
// daemon (fleet, incidents).
type fleetFlags struct {
	addr, token, tlsCA *string
	timeout            *time.Duration
}

// defineFleetFlags defines the connection flags on fs.
func defineFleetFlags(fs *flag.FlagSet) fleetFlags {
	return fleetFlags{
		addr:    fs.String("addr", envOr("POLICYD_ADDR", defaultListen), "the daemon's `address`, host:port (env POLICYD_ADDR)"),
		token:   fs.String("token", os.Getenv("POLICYD_TOKEN"), "bearer `token` when the daemon authenticates (env POLICYD_TOKEN)"),
		tlsCA:   fs.String("tls-ca", os.Getenv("POLICYD_TLS_CA"), "CA certificates PEM `file`: connect with TLS, trusting them (env POLICYD_TLS_CA)"),
		timeout: fs.Duration("timeout", 10*time.Second, "deadline of each call"),
	}
}

// call is the context of one call: the --timeout, and the --token.
func (f fleetFlags) call(ctx context.Context) (context.Context, context.CancelFunc) {
	c, cancel := context.WithTimeout(ctx, *f.timeout)
	if *f.token != "" {
		c = metadata.AppendToOutgoingContext(c, "authorization", "Bearer "+*f.token)
	}
	return c, cancel
}

func fleetCmd(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, fleetUsage)
		if len(args) == 0 {
			return usageErrorf("fleet: no subcommand given (list, get or clear)")
		}
		return nil
	}
	sub, rest := args[0], args[1:]
	fs := newFlagSet("fleet "+sub, fleetUsage)
	ff := defineFleetFlags(fs)
	var provider, model, tenant, reason *string
	var hold, stop, breaker, pace *bool
	switch sub {
	case "list":
		provider = fs.String("provider", "", "only this `provider`'s buckets")
		model = fs.String("model", "", "only this `model`'s buckets")
	case "get":
	case "clear":
		tenant = fs.String("tenant", "", "the bucket's `tenant` (admins); empty: the caller's")
		hold = fs.Bool("hold", false, "clear the shared cooldown")
		stop = fs.Bool("stop", false, "clear the fleet stop")
		breaker = fs.Bool("breaker", false, "close the breaker")
		pace = fs.Bool("pace", false, "forget the learnt request limit")
		reason = fs.String("reason", "", "why, for the journal (at most 256 bytes)")
	default:
		fmt.Fprint(stdout, fleetUsage)
		return usageErrorf("fleet: unknown subcommand %q (want list, get or clear)", sub)
	}
	if err := parseFlagsArgs(fs, rest, stdout); err != nil {
		return err
	}
	want := 1
	if sub == "list" {
		want = 0
	}
	if fs.NArg() != want {
		return usageErrorf("fleet %s: want %d argument(s) (a bucket name), got %d; see 'policyd fleet --help'", sub, want, fs.NArg())
	}
	conn, err := ff.dial("fleet")
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	fc := policydv1.NewFleetServiceClient(conn)
	call := func() (context.Context, context.CancelFunc) { return ff.call(ctx) }
	var resp proto.Message
	switch sub {
	case "list":
		all := &policydv1.ListBucketsResponse{}
		req := &policydv1.ListBucketsRequest{Provider: *provider, Model: *model}
		for {
			c, cancel := call()
			page, err := fc.ListBuckets(c, req)
			cancel()
			if err != nil {
				return fmt.Errorf("fleet list: %w", err)
			}
			all.Buckets = append(all.Buckets, page.GetBuckets()...)
			if page.GetNextPageToken() == "" {
				break
			}
			req.PageToken = page.GetNextPageToken()
		}
		resp = all
	case "get":
		c, cancel := call()
		defer cancel()
		if resp, err = fc.GetBucket(c, &policydv1.GetBucketRequest{Bucket: fs.Arg(0)}); err != nil {
			return fmt.Errorf("fleet get: %w", err)
		}
	case "clear":
		c, cancel := call()
		defer cancel()
		if resp, err = fc.ClearBucket(c, &policydv1.ClearBucketRequest{Bucket: fs.Arg(0), Tenant: *tenant,
			Hold: *hold, Stop: *stop, Breaker: *breaker, Pace: *pace, Reason: *reason}); err != nil {
			return fmt.Errorf("fleet clear: %w", err)
		}
	}
	out, err := protojson.MarshalOptions{Multiline: true}.Marshal(resp)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, string(out))
	return err
}

// dial connects to the daemon, with TLS when --tls-ca is given; errors
// name the command cmd.
func (f fleetFlags) dial(cmd string) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if *f.tlsCA != "" {
		pem, err := os.ReadFile(*f.tlsCA)
		if err != nil {
			return nil, usageErrorf("%s: --tls-ca: %v", cmd, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, usageErrorf("%s: --tls-ca: no certificate in %s", cmd, *f.tlsCA)
		}
		creds = credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	}
	conn, err := grpc.NewClient(*f.addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, usageErrorf("%s: --addr %q: %v", cmd, *f.addr, err)
	}
	return conn, nil
}
