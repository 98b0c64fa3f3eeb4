package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/auth/authtest"
)

const e2eTokenOps = "ops-e2e-token-000000000003"

// tenantsPolicy keeps the limits small enough for a test to reach.
const tenantsPolicy = `
fleet:
  max_buckets: 200
  reports_per_second: 400
  hold: {max_hint: 2m}
`

// honestTenant is acme's day: an outage of openai/gpt-4o seen by three
// agent processes, a 429 with a 30-s hint on gpt-4o-mini, a revoked key.
func honestTenant(t *testing.T, ctx context.Context, d *daemon) {
	t.Helper()
	acme := bearer(ctx, e2eTokenAcme)
	for i := range 21 {
		// A connection per agent: three processes, three clients.
		pc := policydv1.NewPolicyServiceClient(dialCreds(t, d.addr, insecure.NewCredentials()))
		if _, err := pc.NextDelay(acme, &policydv1.NextDelayRequest{ClientId: fmt.Sprintf("agent-%d", i%3), Attempt: 1,
			Failure: &policydv1.Failure{Provider: "openai", Model: "gpt-4o", HttpStatus: 503}}); err != nil {
			t.Fatal(err)
		}
	}
	pc := d.dial(t)
	for _, f := range []*policydv1.Failure{
		{Provider: "openai", Model: "gpt-4o-mini", KeyId: "k1", HttpStatus: 429, Headers: map[string]string{"retry-after": "30"}},
		{Provider: "anthropic", Model: "claude-sonnet-4", KeyId: "k2", HttpStatus: 401,
			Body: `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`},
	} {
		if _, err := pc.NextDelay(acme, &policydv1.NextDelayRequest{ClientId: "agent-0", Attempt: 1, Failure: f}); err != nil {
			t.Fatal(err)
		}
	}
}

// hostileTenant is beta trying every way to bend the fleet: reports over
// thousands of targets, forged counts and limits, week-long hints.
func hostileTenant(t *testing.T, ctx context.Context, d *daemon) {
	t.Helper()
	beta := bearer(ctx, e2eTokenBeta)
	fc := policydv1.NewFleetServiceClient(d.conn(t))
	for s := range 20 {
		stream, err := fc.Coordinate(beta)
		if err != nil {
			t.Fatal(err)
		}
		for m := range 10 {
			var usage []*policydv1.BucketUsage
			for u := range 256 {
				usage = append(usage, &policydv1.BucketUsage{
					Target:  &policydv1.BucketTarget{Provider: "openai", Model: fmt.Sprintf("m-%d-%d-%d", s, m, u), KeyId: "k1"},
					Elapsed: durationpb.New(time.Second), Admitted: 1000, Succeeded: 1000,
					RateLimitHeaders: map[string]string{"x-ratelimit-limit-requests": "1"}})
			}
			req := &policydv1.CoordinateRequest{Usage: usage}
			if m == 0 {
				req.ClientId = "flood"
			}
			if stream.Send(req) != nil {
				break // the daemon ended the stream (RESOURCE_EXHAUSTED)
			}
		}
		// A forged count, far beyond what a process does in a second.
		_ = stream.Send(&policydv1.CoordinateRequest{Usage: []*policydv1.BucketUsage{{Target: &policydv1.BucketTarget{Provider: "openai", Model: "gpt-4o"},
			Elapsed: durationpb.New(time.Second), Succeeded: 1 << 30}}})
		_ = stream.CloseSend()
		for {
			if _, err := stream.Recv(); err != nil {
				break
			}
		}
	}
	pc := d.dial(t)
	for _, model := range []string{"gpt-4o", "gpt-4o-mini"} {
		if _, err := pc.NextDelay(beta, &policydv1.NextDelayRequest{ClientId: "flood", Attempt: 1, Failure: &policydv1.Failure{
			Provider: "openai", Model: model, KeyId: "k1", HttpStatus: 503, Headers: map[string]string{"retry-after": "604800"}}}); err != nil {
			t.Fatal(err)
		}
	}
}

// fleetOf is tenant's buckets (by name), every page of them.
func fleetOf(t *testing.T, ctx context.Context, d *daemon, token string) map[string]*policydv1.Bucket {
	t.Helper()
	fc := policydv1.NewFleetServiceClient(d.conn(t))
	out := map[string]*policydv1.Bucket{}
	req := &policydv1.ListBucketsRequest{}
	for {
		resp, err := fc.ListBuckets(bearer(ctx, token), req)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range resp.GetBuckets() {
			out[b.GetState().GetBucket()] = b
		}
		if resp.GetNextPageToken() == "" {
			return out
		}
		req.PageToken = resp.GetNextPageToken()
	}
}

// TestHostileTenantLeavesOthersAloneE2E: a tenant flooding reports, with
// forged counts and limits and week-long hints, leaves another tenant's
// fleet memory as it is on a daemon where that tenant is alone.
func TestHostileTenantLeavesOthersAloneE2E(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, policyFile, tenantsPolicy)
	tokens := authtest.TokensFile(t, [2]string{"acme", e2eTokenAcme}, [2]string{"beta", e2eTokenBeta}, [2]string{"ops", e2eTokenOps})
	args := []string{"--auth-tokens", tokens, "--policy", policyFile, "--admin-tenants", "ops"}

	alone := startDaemon(t, ctx, args...)
	honestTenant(t, ctx, alone)
	want := fleetOf(t, ctx, alone, e2eTokenAcme)

	shared := startDaemon(t, ctx, args...)
	hostileTenant(t, ctx, shared)
	honestTenant(t, ctx, shared)
	got := fleetOf(t, ctx, shared, e2eTokenAcme)

	if len(want) == 0 || len(got) != len(want) {
		t.Fatalf("acme has %d buckets beside the hostile tenant, %d alone:\n got %v\nwant %v", len(got), len(want), keys(got), keys(want))
	}
	for name, w := range want {
		g := got[name]
		if g == nil {
			t.Errorf("%s: missing beside the hostile tenant", name)
			continue
		}
		ws, gs := w.GetState(), g.GetState()
		if gs.GetBreaker() != ws.GetBreaker() || gs.GetStopped() != ws.GetStopped() || g.GetWindowFailures() != w.GetWindowFailures() ||
			g.GetWindowClients() != w.GetWindowClients() || g.GetAdmitFraction() != w.GetAdmitFraction() ||
			g.GetRequestsPerMinute() != w.GetRequestsPerMinute() ||
			math.Abs(gs.GetHoldRemaining().AsDuration().Seconds()-ws.GetHoldRemaining().AsDuration().Seconds()) > 5 {
			t.Errorf("%s:\n beside the hostile tenant %v\n alone %v", name, g, w)
		}
	}

	// The hostile tenant got no more than its own limits allow.
	beta := fleetOf(t, ctx, shared, e2eTokenBeta)
	if len(beta) > 200 {
		t.Errorf("the hostile tenant has %d buckets, over its 200", len(beta))
	}
	for name, b := range beta {
		if h := b.GetState().GetHoldRemaining().AsDuration(); h > 2*time.Minute {
			t.Errorf("%s: a hint of a week held beta for %v, over max_hint 2m", name, h)
		}
	}
	logs := shared.logs.String()
	if !strings.Contains(logs, `"msg":"fleet tenant_limit"`) || !strings.Contains(logs, `"tenant":"beta"`) {
		t.Errorf("no tenant_limit event logged for beta:\n%s", logs)
	}
	if strings.Contains(logs, `"msg":"fleet tenant_limit","tenant":"acme"`) {
		t.Error("a tenant_limit event for acme")
	}

	// An operator clears acme's hold with the CLI; acme cannot.
	const held = "rate_limit:openai/gpt-4o-mini@k1"
	bin := policydBinary(t)
	clear := func(token string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, bin, "fleet", "clear", "--addr", shared.addr, "--tenant", "acme", "--hold", "--reason", "e2e", held)
		cmd.Env = append(os.Environ(), "POLICYD_TOKEN="+token)
		return cmd.CombinedOutput()
	}
	if out, err := clear(e2eTokenAcme); err == nil || !strings.Contains(string(out), "PermissionDenied") {
		t.Errorf("acme cleared its own hold: %v\n%s", err, out)
	}
	if out, err := clear(e2eTokenOps); err != nil {
		t.Fatalf("policyd fleet clear as ops: %v\n%s", err, out)
	}
	if h := fleetOf(t, ctx, shared, e2eTokenAcme)[held].GetState().GetHoldRemaining(); h != nil {
		t.Errorf("hold %v left after the clear", h.AsDuration())
	}
	waitFor(t, 5*time.Second, "a fleet_clear record with the operator's identity", func() bool {
		l := shared.logs.String()
		return strings.Contains(l, `"msg":"fleet fleet_clear"`) && strings.Contains(l, `"identity":"token:`)
	})
}

func keys(m map[string]*policydv1.Bucket) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
