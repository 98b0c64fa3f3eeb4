package server

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/policy"
)

// The fleet's answers through the real server: a policy with a no-fallback
// profile and a fallback chain, a fleet on a clock the test moves.
const fleetTestPolicy = `
profiles:
  solo:
    extends: default
    strategies:
      OVERLOADED: {retry: true, max_attempts: 5, backoff: constant, initial_delay: 1s, honor_retry_after: true,
                   retry_after_ceiling: 60s, fallback: none}
      RATE_LIMIT: {retry: true, max_attempts: 5, backoff: constant, initial_delay: 1s, honor_retry_after: true,
                   retry_after_ceiling: 60s, fallback: none}
      TIMEOUT: {retry: true, max_attempts: 3, backoff: constant, initial_delay: 1s}
fleet:
  retry_budget: {burst: 50, floor: 1}   # the breaker cases below stay within it
fallbacks:
  openai/gpt-4o: [anthropic/claude-sonnet-4-5, openai/gpt-4o-mini]
context_window_fallbacks:
  openai/gpt-4o: [openai/gpt-4.1]
`

type fleetHarness struct {
	t      *testing.T
	now    time.Time
	client policydv1.PolicyServiceClient
	fleet  policydv1.FleetServiceClient
	agents *agents
}

func newFleetHarness(t *testing.T) *fleetHarness {
	t.Helper()
	p, err := policy.Parse([]byte(fleetTestPolicy), "fleet.yaml", policy.Caps{})
	if err != nil {
		t.Fatal(err)
	}
	h := &fleetHarness{t: t, now: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)}
	clock := func() time.Time { return h.now }
	f := fleet.New(p.Fleet, fleet.WithClock(clock))
	ts := serveTest(t, NewPolicyServer(p, WithClock(clock), WithRand(fixedRand(0.5)), WithFleet(f)), nil)
	h.client, h.fleet = policydv1.NewPolicyServiceClient(ts.conn), policydv1.NewFleetServiceClient(ts.conn)
	h.agents = newAgents(t, ts.addr)
	return h
}

func (h *fleetHarness) decide(client, profile, model string, f *policydv1.Failure) *policydv1.Decision {
	h.t.Helper()
	f.Provider, f.Model, f.KeyId = "openai", model, "prod"
	return nextDelay(h.t, h.agents.policy(client), &policydv1.NextDelayRequest{Failure: f, Attempt: 1, Profile: profile, ClientId: client})
}

func overloaded503() *policydv1.Failure {
	return &policydv1.Failure{HttpStatus: 503, Body: `{"error":{"message":"The server is overloaded or not ready yet.","type":"server_error"}}`}
}

func TestFleetAnswersThroughTheServer(t *testing.T) {
	h := newFleetHarness(t)

	// A hold: one agent's 429 with Retry-After makes another on the same
	// key and model wait for it, and the decision says why.
	d := h.decide("a", "solo", "gpt-4o", &policydv1.Failure{HttpStatus: 429, Headers: map[string]string{"retry-after": "20"}})
	if d.GetAction() != retry || d.GetFleet().GetHoldRemaining().AsDuration() != 20*time.Second {
		t.Fatalf("the 429 itself: %v %v fleet %v", d.GetAction(), d.GetDelay().AsDuration(), d.GetFleet())
	}
	d = h.decide("b", "solo", "gpt-4o", &policydv1.Failure{HttpStatus: 429})
	if d.GetAction() != retry || d.GetDelay().AsDuration() < 20*time.Second || !d.GetFleet().GetChanged() ||
		!strings.Contains(d.GetFleet().GetReason(), "shared cooldown") {
		t.Fatalf("another agent's 429: %v after %v, fleet %v; want a wait for the shared cooldown", d.GetAction(), d.GetDelay().AsDuration(), d.GetFleet())
	}

	// A breaker: 20 overloads from 3 clients open it; then a retry with no
	// fallback (o1 has no chain) waits out the open period, and one whose
	// model has a chain falls back to the chain's first target.
	for i := range 20 {
		h.decide([]string{"a", "b", "c"}[i%3], "solo", "o1", overloaded503())
		h.decide([]string{"a", "b", "c"}[i%3], "solo", "gpt-4o", overloaded503())
	}
	d = h.decide("d", "solo", "o1", overloaded503())
	if d.GetFleet().GetBreaker() != policydv1.BreakerState_BREAKER_STATE_OPEN || d.GetAction() != retry || d.GetDelay().AsDuration() < 5*time.Second {
		t.Fatalf("open breaker, no fallback: %v after %v, fleet %v", d.GetAction(), d.GetDelay().AsDuration(), d.GetFleet())
	}
	d = h.decide("d", "solo", "gpt-4o", overloaded503())
	if d.GetAction() != fallBack || d.GetStopReason() != policydv1.StopReason_STOP_REASON_CIRCUIT_OPEN ||
		d.GetFallback().GetProvider() != "anthropic" || d.GetFallback().GetModel() != "claude-sonnet-4-5" {
		t.Fatalf("open breaker, with a fallback: %v %v %v", d.GetAction(), d.GetStopReason(), d.GetFallback())
	}

	// A fleet stop: a 401 on key prod stops a timeout on the same key.
	h.decide("a", "solo", "gpt-4o-mini", &policydv1.Failure{HttpStatus: 401,
		Body: `{"error":{"message":"Incorrect API key provided.","type":"invalid_request_error","code":"invalid_api_key"}}`})
	d = h.decide("b", "solo", "gpt-4o-mini", &policydv1.Failure{HttpStatus: 504})
	if d.GetAction() != stop || d.GetStopReason() != policydv1.StopReason_STOP_REASON_FLEET_STOP || !d.GetFleet().GetStopped() {
		t.Fatalf("a timeout on the stopped key: %v %v %q", d.GetAction(), d.GetStopReason(), d.GetStopText())
	}

	// The budget: once spent, a retry with a fallback falls back.
	h.now = h.now.Add(10 * time.Minute) // past the breaker and the stop
	for range 50 {
		h.decide("a", "solo", "o3", &policydv1.Failure{HttpStatus: 500})
	}
	d = h.decide("a", "default", "o3", &policydv1.Failure{HttpStatus: 500})
	if d.GetAction() != fallBack || d.GetStopReason() != policydv1.StopReason_STOP_REASON_RETRY_BUDGET_EXHAUSTED {
		t.Fatalf("a spent budget: %v %v %q", d.GetAction(), d.GetStopReason(), d.GetStopText())
	}
}

func TestFallbackChainSkipsOpenTargets(t *testing.T) {
	h := newFleetHarness(t)
	// anthropic/claude-sonnet-4-5's breaker opens.
	for i := range 20 {
		f := overloaded503()
		f.Provider, f.Model = "anthropic", "claude-sonnet-4-5"
		c := []string{"a", "b", "c"}[i%3]
		nextDelay(t, h.agents.policy(c), &policydv1.NextDelayRequest{Failure: f, Attempt: 1, Profile: "solo", ClientId: c})
	}
	// gpt-4o's attempts run out: the chain skips the open target.
	f := overloaded503()
	f.Provider, f.Model = "openai", "gpt-4o"
	d := nextDelay(t, h.client, &policydv1.NextDelayRequest{Failure: f, Attempt: 5, Profile: "solo", ClientId: "z"})
	if d.GetAction() != fallBack || d.GetFallback().GetModel() != "gpt-4o-mini" || d.GetFallback().GetKind() != policydv1.FallbackKind_FALLBACK_KIND_OTHER_MODEL ||
		!strings.Contains(d.GetFallback().GetReason(), "skipping anthropic/claude-sonnet-4-5") {
		t.Fatalf("chain: %v %v", d.GetAction(), d.GetFallback())
	}
	// An input too long takes the context-window chain.
	d = nextDelay(t, h.client, &policydv1.NextDelayRequest{Attempt: 1, Profile: "solo", Failure: &policydv1.Failure{Provider: "openai", Model: "gpt-4o",
		HttpStatus: 400, Body: `{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}`}})
	if d.GetAction() != fallBack || d.GetFallback().GetModel() != "gpt-4.1" || d.GetFallback().GetKind() != policydv1.FallbackKind_FALLBACK_KIND_LARGER_CONTEXT_MODEL {
		t.Fatalf("context chain: %v %v (%s)", d.GetAction(), d.GetFallback(), d.GetStopText())
	}
}

func TestFleetService(t *testing.T) {
	h := newFleetHarness(t)
	for i := range 20 {
		h.decide([]string{"a", "b", "c"}[i%3], "solo", "gpt-4o", overloaded503())
	}
	list, err := h.fleet.ListBuckets(testContext(t), &policydv1.ListBucketsRequest{Provider: "openai"})
	if err != nil || len(list.GetBuckets()) != 1 {
		t.Fatalf("ListBuckets = %v, %v; want the availability bucket", list, err)
	}
	b := list.GetBuckets()[0]
	if b.GetState().GetBucket() != "availability:openai/gpt-4o" || b.GetState().GetBreaker() != policydv1.BreakerState_BREAKER_STATE_OPEN ||
		b.GetWindowClients() != 3 || b.GetFirstClientId() != "a" || !strings.Contains(b.GetState().GetReason(), "20 failures") {
		t.Fatalf("bucket = %v", b)
	}
	got, err := h.fleet.GetBucket(testContext(t), &policydv1.GetBucketRequest{Bucket: "availability:openai/gpt-4o"})
	if err != nil || got.GetBucket().GetScope() != "availability" {
		t.Fatalf("GetBucket = %v, %v", got, err)
	}
	if _, err := h.fleet.GetBucket(testContext(t), &policydv1.GetBucketRequest{Bucket: "availability:openai/none"}); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown bucket: %v, want NotFound", err)
	}
	if _, err := h.fleet.GetBucket(testContext(t), &policydv1.GetBucketRequest{}); status.Code(err) != codes.InvalidArgument || violationField(err) != "bucket" {
		t.Fatalf("no bucket: %v, want InvalidArgument naming bucket", err)
	}
	// Fleet memory off: FAILED_PRECONDITION saying how to turn it on.
	conn := startPolicyServer(t, NewPolicyServer(policy.Builtin()))
	if _, err := policydv1.NewFleetServiceClient(conn).ListBuckets(testContext(t), &policydv1.ListBucketsRequest{}); status.Code(err) != codes.FailedPrecondition ||
		!strings.Contains(err.Error(), "--fleet") {
		t.Fatalf("fleet off: %v", err)
	}
}

func TestFleetLabelsAreBounded(t *testing.T) {
	conn := startPolicyServer(t, NewPolicyServer(policy.Builtin()))
	client := policydv1.NewPolicyServiceClient(conn)
	long := strings.Repeat("k", 129)
	for field, req := range map[string]*policydv1.NextDelayRequest{
		"failure.key_id": {Attempt: 1, Failure: &policydv1.Failure{HttpStatus: 429, KeyId: long}},
		"client_id":      {Attempt: 1, Failure: &policydv1.Failure{HttpStatus: 429}, ClientId: long},
	} {
		_, err := client.NextDelay(testContext(t), req)
		if status.Code(err) != codes.InvalidArgument || violationField(err) != field {
			t.Errorf("%s of 129 bytes: %v, want InvalidArgument naming it", field, err)
		}
	}
}
