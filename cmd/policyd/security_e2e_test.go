package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/auth/authtest"
	"github.com/policyd/policyd/internal/journal/journaltest"
)

const (
	e2eTokenAcme = "acme-e2e-token-000000000001"
	e2eTokenBeta = "beta-e2e-token-000000000002"
)

func TestServeSecurityFlagsE2E(t *testing.T) {
	t.Parallel()
	bin := policydBinary(t)
	ca := authtest.NewCA(t, "flags")
	srv := ca.Server("policyd")
	badTokens := authtest.TokensFile(t, [2]string{"acme", e2eTokenAcme}, [2]string{"beta", e2eTokenAcme})
	tests := []struct {
		name       string
		args       []string
		wantStderr string
	}{
		{name: "cert without key", args: []string{"--tls-cert", srv.CertFile}, wantStderr: "--tls-cert and --tls-key go together"},
		{name: "key without cert", args: []string{"--tls-key", srv.KeyFile}, wantStderr: "--tls-cert and --tls-key go together"},
		{name: "client CA without TLS", args: []string{"--tls-client-ca", ca.CertFile}, wantStderr: "--tls-client-ca needs --tls-cert"},
		{name: "key of another certificate", args: []string{"--tls-cert", srv.CertFile, "--tls-key", ca.Server("x").KeyFile}, wantStderr: "TLS certificate"},
		{name: "client CA not PEM", args: []string{"--tls-cert", srv.CertFile, "--tls-key", srv.KeyFile, "--tls-client-ca", badTokens}, wantStderr: "no PEM certificate"},
		{name: "missing tokens file", args: []string{"--auth-tokens", "/nonexistent/tokens"}, wantStderr: "--auth-tokens"},
		{name: "duplicate token", args: []string{"--auth-tokens", badTokens}, wantStderr: badTokens + " line 2: duplicate token (also on line 1)"},
		{name: "zero message size", args: []string{"--max-message-bytes", "0"}, wantStderr: "--max-message-bytes"},
		{name: "negative rate", args: []string{"--rate-limit", "-1"}, wantStderr: "--rate-limit"},
		{name: "negative burst", args: []string{"--rate-limit", "5", "--rate-burst", "-1"}, wantStderr: "--rate-burst"},
		{name: "negative timeout", args: []string{"--request-timeout", "-1s"}, wantStderr: "--request-timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"serve", "--listen", "127.0.0.1:0"}, tt.args...)
			runCommand(t, bin, "", args, 2, "", tt.wantStderr)
		})
	}
}

// rawCodec sends wire bytes as they are: what a protobuf library refuses to
// marshal, e.g. invalid UTF-8 in a string field.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}
func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}
func (rawCodec) Name() string { return "proto" }

func dialCreds(t *testing.T, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func bearer(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

// The real binary with TLS, a tokens file and a journal: every hostile call
// gets its status and the daemon answers a normal call afterwards; tenants
// are isolated; tokens never reach the logs; SIGHUP rotates the tokens.
func TestServeTokensTLSE2E(t *testing.T) {
	t.Parallel()
	dbURL := journaltest.DatabaseURL(t) // before the deadline: it may start PostgreSQL
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	ca := authtest.NewCA(t, "e2e")
	srv := ca.Server("policyd")
	tokens := authtest.TokensFile(t, [2]string{"acme", e2eTokenAcme}, [2]string{"beta", e2eTokenBeta})
	d := startDaemon(t, ctx, "--auth-tokens", tokens, "--tls-cert", srv.CertFile, "--tls-key", srv.KeyFile,
		"--database-url", dbURL, "--max-message-bytes", "65536", "--log-level", "debug")
	conn := dialCreds(t, d.addr, credentials.NewTLS(&tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}))
	pc, jc := policydv1.NewPolicyServiceClient(conn), policydv1.NewJournalServiceClient(conn)
	acme, beta := bearer(ctx, e2eTokenAcme), bearer(ctx, e2eTokenBeta)
	okReq := &policydv1.ClassifyRequest{Failure: &policydv1.Failure{HttpStatus: 503}}

	begun, err := jc.BeginContext(acme, &policydv1.BeginContextRequest{Provider: "openai"})
	if err != nil {
		t.Fatalf("BeginContext as acme: %v\n%s", err, d.logs.String())
	}
	acmeID := begun.GetContext().GetContextId()
	nonUTF8, err := proto.Marshal(&policydv1.ClassifyRequest{Failure: &policydv1.Failure{Message: "PLACEHOLDER"}})
	if err != nil {
		t.Fatal(err)
	}
	nonUTF8 = bytes.ReplaceAll(nonUTF8, []byte("PLACEHOLDER"), []byte("PLACEHOLDE\xc3"))

	tests := []struct {
		name     string
		call     func() error
		wantCode codes.Code
	}{
		{name: "plaintext client", wantCode: codes.Unavailable, call: func() error {
			_, err := policydv1.NewPolicyServiceClient(dialCreds(t, d.addr, insecure.NewCredentials())).Classify(acme, okReq)
			return err
		}},
		{name: "no token", wantCode: codes.Unauthenticated, call: func() error { _, err := pc.Classify(ctx, okReq); return err }},
		{name: "bad token", wantCode: codes.Unauthenticated, call: func() error {
			_, err := pc.Classify(bearer(ctx, "not-a-token-0000000000000"), okReq)
			return err
		}},
		{name: "health without a token", wantCode: codes.OK, call: func() error {
			_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
			return err
		}},
		{name: "tenant B reads tenant A's context", wantCode: codes.NotFound, call: func() error {
			_, err := jc.GetContext(beta, &policydv1.GetContextRequest{ContextId: acmeID})
			return err
		}},
		{name: "tenant B writes tenant A's context", wantCode: codes.NotFound, call: func() error {
			_, err := jc.RecordAttempt(beta, &policydv1.RecordAttemptRequest{ContextId: acmeID, Attempt: 1, Failure: okReq.GetFailure()})
			return err
		}},
		{name: "tenant A reads its own", wantCode: codes.OK, call: func() error {
			_, err := jc.GetContext(acme, &policydv1.GetContextRequest{ContextId: acmeID})
			return err
		}},
		{name: "invalid UUID", wantCode: codes.InvalidArgument, call: func() error {
			_, err := jc.GetContext(acme, &policydv1.GetContextRequest{ContextId: "../../etc/passwd"})
			return err
		}},
		{name: "oversized body", wantCode: codes.ResourceExhausted, call: func() error {
			_, err := pc.Classify(acme, &policydv1.ClassifyRequest{Failure: &policydv1.Failure{HttpStatus: 500, Body: strings.Repeat("x", 100<<10)}})
			return err
		}},
		{name: "non-UTF-8 message", wantCode: codes.InvalidArgument, call: func() error {
			var out []byte
			return conn.Invoke(acme, "/policyd.v1.PolicyService/Classify", &nonUTF8, &out, grpc.ForceCodecV2(rawCodec{}))
		}},
		{name: "negative attempt", wantCode: codes.InvalidArgument, call: func() error {
			_, err := pc.NextDelay(acme, &policydv1.NextDelayRequest{Attempt: -5, Failure: okReq.GetFailure()})
			return err
		}},
	}
	for _, tt := range tests { // in order, each followed by a normal call
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if got := status.Code(err); got != tt.wantCode {
				t.Fatalf("code = %v, want %v (err %v)", got, tt.wantCode, err)
			}
			if _, err := pc.Classify(acme, okReq); err != nil {
				t.Fatalf("a normal Classify afterwards: %v\n%s", err, d.logs.String())
			}
		})
	}

	t.Run("tokens never logged", func(t *testing.T) {
		logs := d.logs.String()
		for _, tok := range []string{e2eTokenAcme, e2eTokenBeta, "not-a-token"} {
			if strings.Contains(logs, tok) {
				t.Errorf("the logs contain a token %q", tok)
			}
		}
		if !d.hasRecord(map[string]string{"msg": "serving", "auth": "tokens"}) {
			t.Errorf("no serving record with auth=tokens:\n%s", logs)
		}
	})

	t.Run("SIGHUP rotates the tokens", func(t *testing.T) {
		const rotated = "acme-rotated-token-0000000003"
		writeFile(t, tokens, "acme "+rotated+"\n")
		if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the old token is refused and the new one accepted", func() bool {
			_, oldErr := pc.Classify(acme, okReq)
			_, newErr := pc.Classify(bearer(ctx, rotated), okReq)
			return status.Code(oldErr) == codes.Unauthenticated && newErr == nil
		})
		writeFile(t, tokens, "acme short\n")
		if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		eventually(t, "a bad tokens file is logged", func() bool {
			return d.hasRecord(map[string]string{"msg": "tokens reload failed; keeping the tokens in force"})
		})
		if _, err := pc.Classify(bearer(ctx, rotated), okReq); err != nil {
			t.Errorf("after a bad tokens file the tokens in force changed: %v", err)
		}
	})

	t.Run("SIGHUP rotates the TLS certificate", func(t *testing.T) {
		next := ca.Server("policyd-next")
		for from, to := range map[string]string{next.CertFile: srv.CertFile, next.KeyFile: srv.KeyFile} {
			b, err := os.ReadFile(from)
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, to, string(b))
		}
		if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		eventually(t, "a new connection gets the new certificate", func() bool {
			c, err := tls.Dial("tcp", d.addr, &tls.Config{RootCAs: ca.Pool(), NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12})
			if err != nil {
				return false
			}
			defer func() { _ = c.Close() }()
			return bytes.Equal(c.ConnectionState().PeerCertificates[0].Raw, next.TLS.Certificate[0])
		})
		if _, err := pc.Classify(bearer(ctx, "acme-rotated-token-0000000003"), okReq); err != nil {
			t.Errorf("the established connection after the rotation: %v", err)
		}
	})
}

// Mutual TLS without a tokens file: the client certificate's CN is the
// tenant, and the rate limit is per tenant, answered with a pushback.
func TestServeMutualTLSRateLimitE2E(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	ca := authtest.NewCA(t, "e2e-mtls")
	srv := ca.Server("policyd")
	d := startDaemon(t, ctx, "--tls-cert", srv.CertFile, "--tls-key", srv.KeyFile, "--tls-client-ca", ca.CertFile,
		"--rate-limit", "0.1", "--rate-burst", "2")
	client := func(cert *authtest.Issued) policydv1.PolicyServiceClient {
		cfg := &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{cert.TLS}
		}
		return policydv1.NewPolicyServiceClient(dialCreds(t, d.addr, credentials.NewTLS(cfg)))
	}
	acmeCert, betaCert := ca.Client("acme"), ca.Client("beta")
	acme, beta := client(&acmeCert), client(&betaCert)
	okReq := &policydv1.ClassifyRequest{Failure: &policydv1.Failure{HttpStatus: 503}}

	if _, err := client(nil).Classify(ctx, okReq); status.Code(err) != codes.Unavailable {
		t.Errorf("without a client certificate: %v, want Unavailable (handshake refused)", err)
	}
	for i := range 2 {
		if _, err := acme.Classify(ctx, okReq); err != nil {
			t.Fatalf("acme call %d: %v\n%s", i+1, err, d.logs.String())
		}
	}
	var trailer metadata.MD
	_, err := acme.Classify(ctx, okReq, grpc.Trailer(&trailer))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("acme's third call: %v, want ResourceExhausted", err)
	}
	if ms, err := strconv.Atoi(strings.Join(trailer.Get("grpc-retry-pushback-ms"), "")); err != nil || ms < 1 || ms > 10000 {
		t.Errorf("grpc-retry-pushback-ms = %q, want 1..10000", trailer.Get("grpc-retry-pushback-ms"))
	}
	if _, err := beta.Classify(ctx, okReq); err != nil {
		t.Errorf("beta, another tenant, is limited by acme's calls: %v", err)
	}
	if !d.hasRecord(map[string]string{"msg": "serving", "auth": "client-cert"}) {
		t.Errorf("no serving record with auth=client-cert:\n%s", d.logs.String())
	}
}
