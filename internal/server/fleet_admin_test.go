package server

import (
	"log/slog"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/policy"
)

// serveAdmins serves ps with token authentication, acme as the admin tenant.
func serveAdmins(t *testing.T, ps *PolicyServer) policydv1.FleetServiceClient {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	sec := Security{Auth: tokenAuth(t)}
	fs := NewFleetServer(ps.fleet, ps)
	fs.SetAdmins(Admins{Authenticated: true, Tenants: map[string]bool{"acme": true}})
	gs, _ := NewGRPCServer(ps, NewJournalServer(nil, ps), fs, logger, WithServerOptions(sec.ServerOptions(logger)...))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis) //nolint:errcheck // Serve returns nil after Stop.
	t.Cleanup(gs.Stop)
	return policydv1.NewFleetServiceClient(dialT(t, lis.Addr().String(), insecure.NewCredentials()))
}

func TestClearBucketIsForAdmins(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	f := fleet.New(fleet.Defaults(), fleet.WithClock(func() time.Time { return now }))
	ps := NewPolicyServer(policy.Builtin(), WithFleet(f))
	fc := serveAdmins(t, ps)
	// beta's model is held by a failure's hint.
	f.Decide(fleet.Ask{Target: fleet.Target{Tenant: "beta", Provider: "openai", Model: "gpt-4o"}, ClientID: "a",
		FailureType: policydv1.FailureType_FAILURE_TYPE_OVERLOADED, RetryAfter: time.Minute, Switches: fleet.AllOn})
	const bucket = "availability:openai/gpt-4o"
	ctx := testContext(t)
	tests := []struct {
		name  string
		token string
		req   *policydv1.ClearBucketRequest
		want  codes.Code
	}{
		{"a tenant that is no admin", tokenBeta, &policydv1.ClearBucketRequest{Bucket: bucket, Hold: true}, codes.PermissionDenied},
		{"no bucket name", tokenAcme, &policydv1.ClearBucketRequest{Tenant: "beta"}, codes.InvalidArgument},
		{"a bad tenant", tokenAcme, &policydv1.ClearBucketRequest{Tenant: "be ta", Bucket: bucket}, codes.InvalidArgument},
		{"an unknown bucket", tokenAcme, &policydv1.ClearBucketRequest{Tenant: "beta", Bucket: "availability:openai/none"}, codes.NotFound},
		{"the admin clears beta's hold", tokenAcme, &policydv1.ClearBucketRequest{Tenant: "beta", Bucket: bucket, Hold: true, Reason: "false alarm"}, codes.OK},
	}
	for _, tt := range tests {
		resp, err := fc.ClearBucket(as(ctx, tt.token), tt.req)
		if status.Code(err) != tt.want {
			t.Fatalf("%s: %v, want %v", tt.name, err, tt.want)
		}
		if err == nil && resp.GetBucket().GetState().GetHoldRemaining() != nil {
			t.Errorf("%s: hold %v left", tt.name, resp.GetBucket().GetState().GetHoldRemaining())
		}
	}
	if v, _ := f.Bucket("beta", bucket); v.State.HoldLeft != 0 {
		t.Errorf("hold %v left after the clear", v.State.HoldLeft)
	}
}

func TestListBucketsPages(t *testing.T) {
	t.Parallel()
	f := fleet.New(fleet.Defaults())
	for _, m := range []string{"a", "b", "c"} {
		f.Report(fleet.Usage{Target: fleet.Target{Provider: "openai", Model: m}, ClientID: "x", Admitted: 1})
	}
	fc := policydv1.NewFleetServiceClient(startPolicyServer(t, NewPolicyServer(policy.Builtin(), WithFleet(f))))
	ctx := testContext(t)
	var names []string
	req := &policydv1.ListBucketsRequest{PageSize: 4}
	for {
		resp, err := fc.ListBuckets(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range resp.GetBuckets() {
			names = append(names, b.GetState().GetBucket())
		}
		if resp.GetNextPageToken() == "" {
			break
		}
		req.PageToken = resp.GetNextPageToken()
	}
	if len(names) != 6 {
		t.Fatalf("%d buckets over the pages, want 6: %v", len(names), names)
	}
	if _, err := fc.ListBuckets(ctx, &policydv1.ListBucketsRequest{PageSize: 5000}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("page_size 5000: %v, want INVALID_ARGUMENT", err)
	}
}
