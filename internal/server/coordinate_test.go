package server

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/policy"
)

// The Coordinate stream through the real server, on a fleet clock the test
// moves (the streams' refresh timers run on it too).

type atomicClock struct{ ns atomic.Int64 }

func newAtomicClock(t time.Time) *atomicClock {
	c := &atomicClock{}
	c.ns.Store(t.UnixNano())
	return c
}
func (c *atomicClock) now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }
func (c *atomicClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

type streamHarness struct {
	t     *testing.T
	clock *atomicClock
	pc    policydv1.PolicyServiceClient
	fc    policydv1.FleetServiceClient
	// agents: a connection per client id, for failures from distinct clients.
	agents *agents
}

func newStreamHarness(t *testing.T, policyYAML string, opts ...grpc.ServerOption) *streamHarness {
	t.Helper()
	p, err := policy.Parse([]byte(policyYAML), "stream.yaml", policy.Caps{})
	if err != nil {
		t.Fatal(err)
	}
	h := &streamHarness{t: t, clock: newAtomicClock(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC))}
	f := fleet.New(p.Fleet, fleet.WithClock(h.clock.now))
	ts := serveTest(t, NewPolicyServer(p, WithClock(h.clock.now), WithRand(fixedRand(0.5)), WithFleet(f)), nil, WithServerOptions(opts...))
	h.pc, h.fc = policydv1.NewPolicyServiceClient(ts.conn), policydv1.NewFleetServiceClient(ts.conn)
	h.agents = newAgents(t, ts.addr)
	return h
}

type testStream struct {
	t *testing.T
	s grpc.BidiStreamingClient[policydv1.CoordinateRequest, policydv1.CoordinateResponse]
}

func (h *streamHarness) open(ctx context.Context, client string) *testStream {
	h.t.Helper()
	s, err := h.fc.Coordinate(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := s.Send(&policydv1.CoordinateRequest{ClientId: client}); err != nil {
		h.t.Fatal(err)
	}
	return &testStream{t: h.t, s: s}
}

var gpt4o = &policydv1.BucketTarget{Provider: "openai", Model: "gpt-4o", KeyId: "prod"}

func (s *testStream) report(u ...*policydv1.BucketUsage) {
	s.t.Helper()
	for _, x := range u {
		if x.Target == nil {
			x.Target = gpt4o
		}
		if x.Elapsed == nil {
			x.Elapsed = durationpb.New(time.Second)
		}
	}
	if err := s.s.Send(&policydv1.CoordinateRequest{Usage: u}); err != nil {
		s.t.Fatal(err)
	}
}

// next waits for an assignment of gpt4o that satisfies ok, skipping others.
func (s *testStream) next(what string, ok func(*policydv1.Assignment) bool) *policydv1.Assignment {
	s.t.Helper()
	for {
		m, err := s.s.Recv()
		if err != nil {
			s.t.Fatalf("waiting for %s: %v", what, err)
		}
		for _, a := range m.GetAssignments() {
			if a.GetTarget().GetModel() == gpt4o.Model && ok(a) {
				return a
			}
		}
	}
}

const streamTestPolicy = `
fleet:
  breaker: {min_volume: 4, min_clients: 2, open_for: 5s, close_successes: 2}
  slow_start: {window: 10s, from: 0.1}
fallbacks:
  openai/gpt-4o: [anthropic/claude-sonnet-4-5]
`

func TestCoordinateBreakerLifecycle(t *testing.T) {
	h := newStreamHarness(t, streamTestPolicy)
	ctx := testContext(t)
	s := h.open(ctx, "agent-1")

	// The first report subscribes: everything admitted.
	s.report(&policydv1.BucketUsage{Admitted: 1, Succeeded: 1})
	a := s.next("the first assignment", func(*policydv1.Assignment) bool { return true })
	if a.GetBreaker() != policydv1.BreakerState_BREAKER_STATE_CLOSED || a.GetAdmitFraction() != 1 || a.GetTtl().AsDuration() != 15*time.Second || a.GetFallback() != nil {
		t.Fatalf("first assignment: %v", a)
	}

	// Other agents' failures through NextDelay open the breaker (4 outcomes,
	// 80 % failed, 2 clients): the stream hears of it at once, with the
	// fallback chain's target.
	for _, c := range []string{"b", "c", "b", "c"} {
		nextDelay(t, h.agents.policy(c), &policydv1.NextDelayRequest{ClientId: c, Attempt: 1,
			Failure: &policydv1.Failure{Provider: "openai", Model: "gpt-4o", HttpStatus: 503}})
	}
	a = s.next("breaker open", func(a *policydv1.Assignment) bool { return a.GetBreaker() == policydv1.BreakerState_BREAKER_STATE_OPEN })
	if fb := a.GetFallback(); fb.GetProvider() != "anthropic" || fb.GetKind() != policydv1.FallbackKind_FALLBACK_KIND_OTHER_PROVIDER {
		t.Fatalf("open assignment's fallback: %v", fb)
	}
	if !strings.Contains(a.GetReason(), "breaker open") {
		t.Fatalf("reason %q", a.GetReason())
	}

	// The open period ends: pushed as half-open, letting about one first
	// attempt a second through as a probe (this client alone sends fewer:
	// all of them).
	h.clock.advance(5 * time.Second)
	s.next("half-open with probes", func(a *policydv1.Assignment) bool {
		return a.GetBreaker() == policydv1.BreakerState_BREAKER_STATE_HALF_OPEN && a.GetAdmitFraction() == 1
	})
	s.report(&policydv1.BucketUsage{Shed: 3})

	// Two probe successes close it; slow start admits 10 %, then more.
	s.report(&policydv1.BucketUsage{Admitted: 1, Succeeded: 2})
	a = s.next("closed, slow start", func(a *policydv1.Assignment) bool {
		return a.GetBreaker() == policydv1.BreakerState_BREAKER_STATE_CLOSED
	})
	if f := a.GetAdmitFraction(); f < 0.099 || f > 0.11 || !strings.Contains(a.GetReason(), "slow start") {
		t.Fatalf("after the close: admit %v, reason %q; want 0.1 and slow start", f, a.GetReason())
	}
	h.clock.advance(5 * time.Second)
	s.report(&policydv1.BucketUsage{Admitted: 1, Succeeded: 1})
	a = s.next("slow start halfway", func(a *policydv1.Assignment) bool { return a.GetAdmitFraction() > 0.5 })
	if f := a.GetAdmitFraction(); f > 0.56 {
		t.Fatalf("halfway through slow start: admit %v, want 0.55", f)
	}

	// FleetService shows the stream's counts.
	b, err := h.fc.GetBucket(ctx, &policydv1.GetBucketRequest{Bucket: "availability:openai/gpt-4o"})
	if err != nil {
		t.Fatal(err)
	}
	if bb := b.GetBucket(); bb.GetReports() != 4 || bb.GetFirstAttemptsAdmitted() != 3 || bb.GetFirstAttemptsShed() != 3 || bb.GetSuccesses() != 4 ||
		bb.GetStreamingClients() != 1 || bb.GetAssignmentsSent() < 5 {
		t.Fatalf("bucket counts: %v", bb)
	}
}

func TestCoordinateHoldAndStop(t *testing.T) {
	h := newStreamHarness(t, streamTestPolicy)
	ctx := testContext(t)
	s := h.open(ctx, "agent-1")
	s.report(&policydv1.BucketUsage{Admitted: 1})
	s.next("the first assignment", func(*policydv1.Assignment) bool { return true })

	// Another agent's 429 with Retry-After: the first attempts wait for it.
	nextDelay(t, h.pc, &policydv1.NextDelayRequest{ClientId: "b", Attempt: 1, Failure: &policydv1.Failure{
		Provider: "openai", Model: "gpt-4o", KeyId: "prod", HttpStatus: 429, Headers: map[string]string{"retry-after": "20"}}})
	a := s.next("a hold", func(a *policydv1.Assignment) bool { return a.GetHold() != nil })
	if d := a.GetHold().AsDuration(); d < 20*time.Second || d > 50*time.Second {
		t.Fatalf("hold %v, want the 20 s cooldown plus this client's slot", d)
	}
	if a.GetFallback() == nil {
		t.Fatal("an assignment that holds names no fallback")
	}

	// A revoked key stops every first attempt on it.
	nextDelay(t, h.pc, &policydv1.NextDelayRequest{ClientId: "b", Attempt: 1, Failure: &policydv1.Failure{
		Provider: "openai", Model: "gpt-4o", KeyId: "prod", HttpStatus: 401,
		Body: `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`}})
	a = s.next("a key stop", func(a *policydv1.Assignment) bool { return a.GetStop() != nil })
	if d := a.GetStop().AsDuration(); d != 60*time.Second || !strings.Contains(a.GetReason(), "stopped") {
		t.Fatalf("stop %v reason %q", d, a.GetReason())
	}
}

func TestCoordinateRefreshAndAbandon(t *testing.T) {
	h := newStreamHarness(t, "fleet:\n  stream: {ttl: 3s, abandon_after: 20s}\n")
	ctx := testContext(t)
	s := h.open(ctx, "agent-1")
	s.report(&policydv1.BucketUsage{Admitted: 1})
	a := s.next("the first assignment", func(*policydv1.Assignment) bool { return true })
	if a.GetTtl().AsDuration() != 3*time.Second {
		t.Fatalf("ttl %v", a.GetTtl().AsDuration())
	}
	// Nothing changes, no report: refreshed before the 3 s are up.
	h.clock.advance(2 * time.Second)
	s.next("a refresh", func(a *policydv1.Assignment) bool { return !a.GetAbandon() && a.GetTtl().AsDuration() == 3*time.Second })
	// No report for 20 s: abandoned.
	h.clock.advance(20 * time.Second)
	s.next("an abandon", func(a *policydv1.Assignment) bool { return a.GetAbandon() })
}

func TestCoordinateRejectsBadReports(t *testing.T) {
	h := newStreamHarness(t, streamTestPolicy)
	ctx := testContext(t)
	for _, c := range []struct {
		name      string
		msgs      []*policydv1.CoordinateRequest
		wantField string
	}{
		{"no client id", []*policydv1.CoordinateRequest{{}}, "client_id"},
		{"unknown profile", []*policydv1.CoordinateRequest{{ClientId: "a", Profile: "nope"}}, "profile"},
		{"no provider", []*policydv1.CoordinateRequest{{ClientId: "a"}, {Usage: []*policydv1.BucketUsage{
			{Target: gpt4o, Elapsed: durationpb.New(time.Second)}, {Target: &policydv1.BucketTarget{Model: "x"}, Elapsed: durationpb.New(time.Second)}}}},
			"usage[1].target.provider"},
		{"no elapsed", []*policydv1.CoordinateRequest{{ClientId: "a", Usage: []*policydv1.BucketUsage{{Target: gpt4o}}}}, "usage[0].elapsed"},
		{"elapsed too long", []*policydv1.CoordinateRequest{{ClientId: "a", Usage: []*policydv1.BucketUsage{{Target: gpt4o, Elapsed: durationpb.New(time.Hour)}}}}, "usage[0].elapsed"},
		{"a count too large", []*policydv1.CoordinateRequest{{ClientId: "a", Usage: []*policydv1.BucketUsage{{Target: gpt4o, Elapsed: durationpb.New(time.Second), Shed: 1 << 40}}}}, "usage[0].shed"},
		{"a billion successes in a second", []*policydv1.CoordinateRequest{{ClientId: "a", Usage: []*policydv1.BucketUsage{{Target: gpt4o, Elapsed: durationpb.New(time.Second), Succeeded: 1 << 30}}}}, "usage[0].succeeded"},
		{"admitted beyond the interval", []*policydv1.CoordinateRequest{{ClientId: "a", Usage: []*policydv1.BucketUsage{{Target: gpt4o, Elapsed: durationpb.New(2 * time.Second), Admitted: 2001}}}}, "usage[0].admitted"},
		{"tokens beyond their calls", []*policydv1.CoordinateRequest{{ClientId: "a", Usage: []*policydv1.BucketUsage{{Target: gpt4o, Elapsed: durationpb.New(time.Second), Admitted: 2, FirstAttemptInputTokens: 4_000_001}}}}, "usage[0].first_attempt_input_tokens"},
		{"retry tokens without retries", []*policydv1.CoordinateRequest{{ClientId: "a", Usage: []*policydv1.BucketUsage{{Target: gpt4o, Elapsed: durationpb.New(time.Second), Admitted: 2, RetryInputTokens: 1}}}}, "usage[0].retry_input_tokens"},
		{"used tokens beyond their attempts", []*policydv1.CoordinateRequest{{ClientId: "a", Usage: []*policydv1.BucketUsage{{Target: gpt4o, Elapsed: durationpb.New(time.Second), Admitted: 1, InputTokensUsed: 2_000_001}}}}, "usage[0].input_tokens_used"},
		{"estimates of used tokens without attempts", []*policydv1.CoordinateRequest{{ClientId: "a", Usage: []*policydv1.BucketUsage{{Target: gpt4o, Elapsed: durationpb.New(time.Second), Shed: 1, InputTokensEstimatedForUsed: 1}}}}, "usage[0].input_tokens_estimated_for_used"},
		{"output tokens beyond their calls", []*policydv1.CoordinateRequest{{ClientId: "a", Usage: []*policydv1.BucketUsage{{Target: gpt4o, Elapsed: durationpb.New(time.Second), Admitted: 2, OutputTokensUsed: 2_000_001, OutputTokensUsedCalls: 1}}}}, "usage[0].output_tokens_used"},
		{"output tokens without their calls", []*policydv1.CoordinateRequest{{ClientId: "a", Usage: []*policydv1.BucketUsage{{Target: gpt4o, Elapsed: durationpb.New(time.Second), Admitted: 2, OutputTokensUsed: 1}}}}, "usage[0].output_tokens_used"},
		{"output calls beyond the attempts", []*policydv1.CoordinateRequest{{ClientId: "a", Usage: []*policydv1.BucketUsage{{Target: gpt4o, Elapsed: durationpb.New(time.Second), Admitted: 1, Retries: 1, OutputTokensUsed: 10, OutputTokensUsedCalls: 3}}}}, "usage[0].output_tokens_used_calls"},
		{"parked beyond the interval", []*policydv1.CoordinateRequest{{ClientId: "a", Usage: []*policydv1.BucketUsage{{Target: gpt4o, Elapsed: durationpb.New(time.Second), ParkedNew: 1001}}}}, "usage[0].parked_new"},
		{"more fallen back than shed", []*policydv1.CoordinateRequest{{ClientId: "a", Usage: []*policydv1.BucketUsage{{Target: gpt4o, Elapsed: durationpb.New(time.Second), Shed: 2, FellBack: 3}}}}, "usage[0].fell_back"},
		{"more batch than first attempts", []*policydv1.CoordinateRequest{{ClientId: "a", Usage: []*policydv1.BucketUsage{{Target: gpt4o, Elapsed: durationpb.New(time.Second), Admitted: 2, BatchFirstAttempts: 3}}}}, "usage[0].batch_first_attempts"},
		// The second report of a target on a stream claims ten minutes the
		// server did not see pass.
		{"an interval the server did not see", []*policydv1.CoordinateRequest{{ClientId: "a", Usage: []*policydv1.BucketUsage{{Target: gpt4o, Elapsed: durationpb.New(time.Second), Succeeded: 1}}},
			{Usage: []*policydv1.BucketUsage{{Target: gpt4o, Elapsed: durationpb.New(10 * time.Minute), Succeeded: 500_000}}}}, "usage[0].succeeded"},
		{"not a rate-limit header", []*policydv1.CoordinateRequest{{ClientId: "a", Usage: []*policydv1.BucketUsage{{Target: gpt4o, Elapsed: durationpb.New(time.Second),
			RateLimitHeaders: map[string]string{"authorization": "Bearer sk-..."}}}}}, `usage[0].rate_limit_headers["authorization"]`},
		{"key id too long", []*policydv1.CoordinateRequest{{ClientId: "a", Usage: []*policydv1.BucketUsage{{Target: &policydv1.BucketTarget{Provider: "openai", KeyId: strings.Repeat("k", 129)},
			Elapsed: durationpb.New(time.Second)}}}}, "usage[0].target.key_id"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := h.fc.Coordinate(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range c.msgs {
				if err := s.Send(m); err != nil {
					t.Fatal(err)
				}
			}
			var rerr error
			for rerr == nil {
				_, rerr = s.Recv()
			}
			st := status.Convert(rerr)
			if st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), c.wantField+":") {
				t.Fatalf("got %v %q, want INVALID_ARGUMENT naming %s", st.Code(), st.Message(), c.wantField)
			}
		})
	}
	// The good usages before the bad ones were applied (one in the same
	// report, one a report before).
	b, err := h.fc.GetBucket(ctx, &policydv1.GetBucketRequest{Bucket: "availability:openai/gpt-4o"})
	if err != nil || b.GetBucket().GetReports() != 2 {
		t.Fatalf("the valid usage before the bad one: %v %v", b, err)
	}
}

func TestCoordinateNeedsFleetAndAuth(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	// Fleet memory off: FAILED_PRECONDITION, which clients read as "do not
	// gate".
	conn := startPolicyServer(t, NewPolicyServer(policy.Builtin()))
	s, err := policydv1.NewFleetServiceClient(conn).Coordinate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Send(&policydv1.CoordinateRequest{ClientId: "a"})
	if _, err := s.Recv(); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("fleet off: %v", err)
	}

	// With tokens: no token is UNAUTHENTICATED; each tenant sees its own
	// fleet (beta's breaker does not gate acme).
	p, err := policy.Parse([]byte(streamTestPolicy), "stream.yaml", policy.Caps{})
	if err != nil {
		t.Fatal(err)
	}
	ps := NewPolicyServer(p, WithFleet(fleet.New(p.Fleet)))
	saddr := serveSecured(t, ps, Security{Auth: tokenAuth(t)})
	sconn := dialT(t, saddr, insecure.NewCredentials())
	beta := newAgents(t, saddr)
	fc := policydv1.NewFleetServiceClient(sconn)
	anon, err := fc.Coordinate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = anon.Send(&policydv1.CoordinateRequest{ClientId: "a"})
	if _, err := anon.Recv(); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no token: %v", err)
	}
	for _, c := range []string{"x", "y", "x", "y"} {
		if _, err := beta.policy(c).NextDelay(as(ctx, tokenBeta), &policydv1.NextDelayRequest{ClientId: c, Attempt: 1,
			Failure: &policydv1.Failure{Provider: "openai", Model: "gpt-4o", HttpStatus: 503}}); err != nil {
			t.Fatal(err)
		}
	}
	for tenant, want := range map[string]policydv1.BreakerState{tokenBeta: policydv1.BreakerState_BREAKER_STATE_OPEN, tokenAcme: policydv1.BreakerState_BREAKER_STATE_CLOSED} {
		s, err := fc.Coordinate(as(ctx, tenant))
		if err != nil {
			t.Fatal(err)
		}
		ts := &testStream{t: t, s: s}
		_ = s.Send(&policydv1.CoordinateRequest{ClientId: "a"})
		ts.report(&policydv1.BucketUsage{Admitted: 1})
		if a := ts.next("the first assignment", func(*policydv1.Assignment) bool { return true }); a.GetBreaker() != want {
			t.Errorf("breaker %v, want %v", a.GetBreaker(), want)
		}
	}
}

// Token headers and token estimates pace the bucket on input tokens, batch
// calls yield first, and FleetService shows each limit with what is left.
func TestCoordinateTokensAndClasses(t *testing.T) {
	h := newStreamHarness(t, streamTestPolicy)
	ctx := testContext(t)
	// OpenAI's headers, as its "Rate limits" guide lists them.
	headers := map[string]string{
		"x-ratelimit-limit-requests": "4000", "x-ratelimit-remaining-requests": "3990",
		"x-ratelimit-limit-tokens": "60000", "x-ratelimit-remaining-tokens": "1000", "x-ratelimit-reset-tokens": "5s",
	}
	var streams []*testStream
	for _, c := range []string{"agent-1", "agent-2"} {
		s := h.open(ctx, c)
		// 10 calls a second of 200 input tokens each, half of them batch:
		// 2,000 tokens a second against a limit of 1,000.
		s.report(&policydv1.BucketUsage{Elapsed: durationpb.New(10 * time.Second), Admitted: 100,
			BatchFirstAttempts: 50, FirstAttemptInputTokens: 20000, Succeeded: 100, RateLimitHeaders: headers})
		streams = append(streams, s)
	}
	streams[1].report(&policydv1.BucketUsage{Admitted: 1, FirstAttemptInputTokens: 200})
	a := streams[1].next("paced on input tokens", func(a *policydv1.Assignment) bool { return a.BatchAdmitFraction != nil })
	// 930 tokens a second of room for 4,000: about 0.23 of first attempts,
	// all of it to the interactive half while batch keeps its floor.
	if f, b := a.GetAdmitFraction(), a.GetBatchAdmitFraction(); f < 0.4 || f > 0.5 || b < 0.02 || b > 0.03 ||
		!strings.Contains(a.GetReason(), "pacing a limit of 60000 input tokens a minute") || !strings.Contains(a.GetReason(), "batch yields first") {
		t.Fatalf("assignment %v", a)
	}
	b, err := h.fc.GetBucket(ctx, &policydv1.GetBucketRequest{Bucket: "rate_limit:openai/gpt-4o@prod"})
	if err != nil {
		t.Fatal(err)
	}
	var tokens *policydv1.ProviderLimit
	for _, l := range b.GetBucket().GetLimits() {
		if l.GetName() == "input_tokens" {
			tokens = l
		}
	}
	if tokens == nil || tokens.GetPerMinute() != 60000 || !tokens.GetPacing() || tokens.GetRemaining() != 1000 ||
		tokens.GetResetIn().AsDuration() != 5*time.Second || b.GetBucket().GetInputTokensPerMinute() != 60000 {
		t.Fatalf("limits %v", b.GetBucket().GetLimits())
	}
}

// A paced bucket's grants reach the gates: every paced assignment carries
// the client's running count (0 too), and a client that reports a parked
// call is granted one.
func TestCoordinatePaceGrants(t *testing.T) {
	h := newStreamHarness(t, streamTestPolicy)
	ctx := testContext(t)
	headers := map[string]string{"x-ratelimit-limit-requests": "600", "x-ratelimit-remaining-requests": "0"}
	one, two := h.open(ctx, "agent-1"), h.open(ctx, "agent-2")
	for _, s := range []*testStream{one, two} {
		// 20 calls a second between them against a limit of 10.
		s.report(&policydv1.BucketUsage{Elapsed: durationpb.New(10 * time.Second), Admitted: 100, Succeeded: 100, RateLimitHeaders: headers})
	}
	two.report(&policydv1.BucketUsage{Parked: 1, ParkedNew: 1, RateLimitHeaders: headers})
	a := two.next("a grant", func(a *policydv1.Assignment) bool { return a.GetPacePermits() == 1 })
	if a.GetAdmitFraction() >= 1 || !strings.Contains(a.GetReason(), "pacing a limit of 600 requests a minute") {
		t.Fatalf("assignment %v, want paced with one grant", a)
	}
	one.report(&policydv1.BucketUsage{Admitted: 1, RateLimitHeaders: headers})
	if a := one.next("paced", func(a *policydv1.Assignment) bool { return a.PacePermits != nil }); a.GetPacePermits() != 0 {
		t.Fatalf("assignment %v, want a count of 0 for a client with nothing parked", a)
	}
}

// A target's cap on requests in flight reaches the gates as leases.
func TestCoordinateInFlightLease(t *testing.T) {
	h := newStreamHarness(t, strings.Replace(streamTestPolicy, "fleet:\n", "fleet:\n  max_in_flight: {openai/gpt-4o: 8}\n", 1))
	ctx := testContext(t)
	one, two := h.open(ctx, "agent-1"), h.open(ctx, "agent-2")
	two.report(&policydv1.BucketUsage{Admitted: 1, InFlight: 1})
	one.report(&policydv1.BucketUsage{Admitted: 1, InFlight: 3})
	// Weights 4 and 2 of 8: 5.33 and 2.67, the larger remainder rounded up.
	// The reports may reach the fleet in either order: the lease follows
	// once both have.
	a := one.next("a lease of 5", func(a *policydv1.Assignment) bool { return a.GetInFlightLease() == 5 })
	if a.GetInFlightLease() != 5 || !strings.Contains(a.GetReason(), "a lease of 5 of the 8 requests in flight") {
		t.Fatalf("assignment %v, want a lease of 5", a)
	}
}
