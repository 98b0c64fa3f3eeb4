package policyd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	policydv1 "github.com/policyd/policyd/clients/go/internal/gen/policyd/v1"
)

// The report bookkeeping and the stream's handling of policyd's answers,
// on a fake stream and a clock the test sets; fleet_gate_test.go runs the
// real stream against a real policyd.

type fakeStream struct {
	sent []*policydv1.CoordinateRequest
	fail error
}

func (s *fakeStream) Send(m *policydv1.CoordinateRequest) error {
	if s.fail != nil {
		return s.fail
	}
	s.sent = append(s.sent, m)
	return nil
}

type setClock struct{ now time.Time }

func (c *setClock) Now() time.Time                 { return c.now }
func (c *setClock) NewTimer(d time.Duration) Timer { panic("no timers here") }

func testCoordinator(t *testing.T) (*coordinator, *setClock) {
	t.Helper()
	clock := &setClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := newClient(nil, newConfig([]Option{WithClock(clock), WithLogger(slog.New(slog.DiscardHandler))}))
	return &coordinator{c: c, ctx: context.Background()}, clock
}

func usageOf(t *testing.T, m *policydv1.CoordinateRequest, model string) *policydv1.BucketUsage {
	t.Helper()
	for _, u := range m.GetUsage() {
		if u.GetTarget().GetModel() == model {
			return u
		}
	}
	t.Fatalf("no usage of %q in %v", model, m)
	return nil
}

func TestReportsKeepWhatCouldNotBeSent(t *testing.T) {
	co, clock := testCoordinator(t)
	g := co.c.gate
	a := target{provider: "openai", model: "a"}
	g.check(clock.now, a, -1, gateCall{}, constRand(0), 0)
	g.check(clock.now, a, -1, gateCall{}, constRand(0), 0)
	g.record(clock.now, a, true)
	g.countRetry(clock.now, a, 0)
	g.countFailedLocally(clock.now, a)
	g.observeRateLimits(clock.now, a, map[string]string{"x-ratelimit-limit-requests": "600"})

	clock.now = clock.now.Add(1500 * time.Millisecond)
	s := &fakeStream{fail: io.EOF}
	if err := co.sendReports(s, reportActive); !errors.Is(err, io.EOF) {
		t.Fatalf("sendReports = %v, want the stream's error", err)
	}
	// More activity, then a report that goes.
	g.check(clock.now, a, -1, gateCall{}, constRand(0), 0)
	clock.now = clock.now.Add(500 * time.Millisecond)
	s.fail = nil
	if err := co.sendReports(s, reportActive); err != nil {
		t.Fatal(err)
	}
	u := usageOf(t, s.sent[0], "a")
	if u.GetAdmitted() != 3 || u.GetSucceeded() != 1 || u.GetRetries() != 1 || u.GetFailed() != 1 || u.GetShed() != 0 ||
		u.GetRateLimitHeaders()["x-ratelimit-limit-requests"] != "600" || u.GetElapsed().AsDuration() != 2*time.Second {
		t.Fatalf("usage %v: want the unsent counts added (3 admitted, 1 succeeded, 1 retry, 1 failed), the headers, 2s elapsed", u)
	}
	// Nothing new: nothing sent. New activity: elapsed from the last report.
	if err := co.sendReports(s, reportActive); err != nil || len(s.sent) != 1 {
		t.Fatalf("an idle tick sent %d messages (%v)", len(s.sent)-1, err)
	}
	clock.now = clock.now.Add(time.Second)
	g.check(clock.now, a, -1, gateCall{}, constRand(0), 0)
	if err := co.sendReports(s, reportActive); err != nil {
		t.Fatal(err)
	}
	if u := usageOf(t, s.sent[1], "a"); u.GetAdmitted() != 1 || u.GetElapsed().AsDuration() != time.Second || u.GetRateLimitHeaders() != nil {
		t.Fatalf("second report %v, want 1 admitted over 1s and no headers", u)
	}
	// A new stream re-reports (re-subscribes) every subscribed target.
	if err := co.sendReports(s, reportResubscribe); err != nil || len(s.sent) != 3 || usageOf(t, s.sent[2], "a").GetAdmitted() != 0 {
		t.Fatalf("resubscribe: %v, %d messages", err, len(s.sent))
	}
}

func TestReportsAtMost256AMessage(t *testing.T) {
	co, clock := testCoordinator(t)
	for i := range 300 {
		co.c.gate.check(clock.now, target{provider: "p", model: fmt.Sprint(i)}, -1, gateCall{}, constRand(0), 0)
	}
	s := &fakeStream{}
	if err := co.sendReports(s, reportActive); err != nil {
		t.Fatal(err)
	}
	if len(s.sent) != 2 || len(s.sent[0].GetUsage()) != 256 || len(s.sent[1].GetUsage()) != 44 {
		t.Fatalf("%d messages, want 256 + 44 usages", len(s.sent))
	}
	for _, u := range s.sent[0].GetUsage() {
		if d := u.GetElapsed().AsDuration(); d <= 0 || d > 10*time.Minute {
			t.Fatalf("elapsed %v, want within (0, 10m]", d)
		}
	}
}

// A report carries the batch class's share of the first attempts, the
// calls' input tokens (first attempts at their first check, retries sent;
// at most 2,000,000 a call counted) and the calls in flight now.
func TestReportsCarryClassesTokensAndInFlight(t *testing.T) {
	co, clock := testCoordinator(t)
	g := co.c.gate
	a := target{provider: "openai", model: "a"}
	g.assign(clock.now, a, &assignment{ttl: time.Minute, admitFraction: 1, batchAdmitFraction: 0.5, hasBatchFraction: true})
	g.check(clock.now, a, -1, gateCall{inputTokens: 100}, constRand(0.9), -1)              // interactive: admitted
	g.check(clock.now, a, -1, gateCall{batch: true, inputTokens: 30}, constRand(0.1), -1)  // batch: admitted
	g.check(clock.now, a, -1, gateCall{batch: true, inputTokens: 5e6}, constRand(0.9), -1) // batch: shed, its tokens clipped
	g.countRetry(clock.now, a, 40)
	g.flight(clock.now, a, true)
	g.flight(clock.now, a, true)
	g.flight(clock.now, a, false)
	s := &fakeStream{}
	if err := co.sendReports(s, reportActive); err != nil {
		t.Fatal(err)
	}
	u := usageOf(t, s.sent[0], "a")
	if u.GetAdmitted() != 2 || u.GetShed() != 1 || u.GetBatchFirstAttempts() != 2 {
		t.Errorf("usage %v: want 2 admitted and 1 shed, 2 of them batch", u)
	}
	if u.GetFirstAttemptInputTokens() != 100+30+2_000_000 || u.GetRetryInputTokens() != 40 || u.GetInFlight() != 1 {
		t.Errorf("usage %v: want 2,000,130 first-attempt tokens, 40 retry tokens, 1 in flight", u)
	}
	// The gauge's change is activity; it never goes below 0.
	g.flight(clock.now, a, false)
	g.flight(clock.now, a, false)
	if err := co.sendReports(s, reportActive); err != nil || len(s.sent) != 2 {
		t.Fatalf("the gauge's change sent %d messages (%v), want 1", len(s.sent)-1, err)
	}
	if u := usageOf(t, s.sent[1], "a"); u.GetInFlight() != 0 || u.GetFirstAttemptInputTokens() != 0 || u.GetBatchFirstAttempts() != 0 {
		t.Errorf("second report %v: want nothing in flight and no new counts", u)
	}
	// A parked call is reported as parked (a gauge) and parked at its
	// first check, with its tokens.
	g.assign(clock.now, a, &assignment{ttl: time.Minute, admitFraction: 0})
	if v := g.check(clock.now, a, -1, gateCall{inputTokens: 700}, constRand(0.5), 0); v.action != gatePark {
		t.Fatalf("verdict %v, want the call parked", v.action)
	}
	if err := co.sendReports(s, reportActive); err != nil || len(s.sent) != 3 {
		t.Fatalf("sent %d messages (%v), want 3", len(s.sent), err)
	}
	if u := usageOf(t, s.sent[2], "a"); u.GetFirstAttemptInputTokens() != 700 || u.GetParked() != 1 || u.GetParkedNew() != 1 {
		t.Errorf("third report %v: want the parked call (1 parked, 1 parked new) and its 700 tokens", u)
	}
}

func TestUrgentReports(t *testing.T) {
	co, clock := testCoordinator(t)
	g := co.c.gate
	old, fresh := target{provider: "p", model: "old"}, target{provider: "p", model: "new"}
	g.check(clock.now, old, -1, gateCall{}, constRand(0), 0)
	// The first call of a target waits for its first assignment, whose
	// report is urgent; a target already reported does not wait.
	ch, until := g.awaitFirst(clock.now, clock.now, fresh)
	if ch == nil || until.Sub(clock.now) != firstAnswerWait {
		t.Fatalf("awaitFirst = %v, %v; want a wait of %v", ch, until, firstAnswerWait)
	}
	s := &fakeStream{}
	if err := co.sendReports(s, reportUrgent); err != nil || len(s.sent) != 1 || len(s.sent[0].GetUsage()) != 1 ||
		s.sent[0].GetUsage()[0].GetTarget().GetModel() != "new" {
		t.Fatalf("urgent reports: %v, %v; want the new target alone", err, s.sent)
	}
	// Its assignment releases the wait.
	g.assign(clock.now, fresh, &assignment{ttl: time.Minute, breaker: policydv1.BreakerState_BREAKER_STATE_HALF_OPEN, admitFraction: 0})
	select {
	case <-ch:
	default:
		t.Fatal("the assignment did not release the first call's wait")
	}
	if ch, _ := g.awaitFirst(clock.now, clock.now, fresh); ch != nil {
		t.Fatal("an assigned target still waits")
	}
	// A success while half-open is a probe's answer: urgent.
	if !g.record(clock.now, fresh, true) || g.record(clock.now, old, true) {
		t.Fatal("record: want urgent for the half-open target only")
	}
	// The stream down: no first call waits, and waiting ones go.
	other := target{provider: "p", model: "other"}
	ch, _ = g.awaitFirst(clock.now, clock.now, other)
	g.setDown(true)
	select {
	case <-ch:
	default:
		t.Fatal("the stream going down did not release the wait")
	}
	if ch, _ := g.awaitFirst(clock.now, clock.now, target{provider: "p", model: "more"}); ch != nil {
		t.Fatal("a first call waits while the stream is down")
	}
}

func TestAbandonForgets(t *testing.T) {
	co, clock := testCoordinator(t)
	g := co.c.gate
	a := target{provider: "p", model: "a"}
	g.check(clock.now, a, -1, gateCall{}, constRand(0), 0)
	_ = co.sendReports(&fakeStream{}, reportActive)
	g.assign(clock.now, a, &assignment{ttl: time.Minute, breaker: policydv1.BreakerState_BREAKER_STATE_OPEN})
	g.assign(clock.now, a, nil)
	if _, ok := g.entries[a]; ok {
		t.Fatal("an abandoned idle target with a full budget is still in the table")
	}
	// With a spent budget the row stays, without its assignment, and is not reported.
	g.check(clock.now, a, -1, gateCall{}, constRand(0), 0)
	g.record(clock.now, a, false)
	_ = co.sendReports(&fakeStream{}, reportActive)
	g.assign(clock.now, a, &assignment{ttl: time.Minute, breaker: policydv1.BreakerState_BREAKER_STATE_OPEN})
	g.assign(clock.now, a, nil)
	e := g.entries[a]
	if e == nil || e.a != nil || e.tokens != 9 {
		t.Fatalf("row %+v, want kept without an assignment and with 9 tokens", e)
	}
	s := &fakeStream{}
	if _ = co.sendReports(s, reportResubscribe); len(s.sent) != 0 {
		t.Fatalf("an abandoned target was reported: %v", s.sent)
	}
	if v := g.check(clock.now, a, -1, gateCall{}, constRand(0), 0); v.action != gateAdmit {
		t.Fatalf("after abandon: %v, want admit", v.action)
	}
}

func TestRefusedReportsAndProfile(t *testing.T) {
	co, clock := testCoordinator(t)
	g := co.c.gate
	co.profile = "mine"
	good, bad := target{provider: "p", model: "good"}, target{provider: "p", model: "bad"}
	g.check(clock.now, good, -1, gateCall{}, constRand(0), 0)
	g.check(clock.now, bad, -1, gateCall{}, constRand(0), 0)
	co.lastBatch = []target{good, bad}
	if co.broken(status.Error(codes.InvalidArgument, "usage[1].elapsed: 0s is not in (0, 10m0s]")) {
		t.Fatal("a refused report ended the stream for good")
	}
	g.check(clock.now, bad, -1, gateCall{}, constRand(0), 0)
	s := &fakeStream{}
	_ = co.sendReports(s, reportResubscribe)
	if len(s.sent) != 1 || len(s.sent[0].GetUsage()) != 1 || s.sent[0].GetUsage()[0].GetTarget().GetModel() != "good" {
		t.Fatalf("after policyd refused usage[1]: %v, want only the other target reported", s.sent)
	}
	if co.broken(status.Error(codes.InvalidArgument, `profile: unknown profile "mine"`)); co.profile != "" {
		t.Fatalf("profile %q after policyd refused it, want none", co.profile)
	}
	for _, code := range []codes.Code{codes.FailedPrecondition, codes.Unimplemented} {
		co, clock := testCoordinator(t)
		co.c.gate.assign(clock.now, good, &assignment{ttl: time.Minute, breaker: policydv1.BreakerState_BREAKER_STATE_OPEN})
		if !co.broken(status.Error(code, "fleet memory is off")) {
			t.Fatalf("%v: the client keeps trying the stream", code)
		}
		if v := co.c.gate.check(clock.now, good, -1, gateCall{}, constRand(0), 0); v.action != gateAdmit {
			t.Fatalf("%v: the gate does not admit everything", code)
		}
	}
	if co.broken(status.Error(codes.Unavailable, "connection refused")) {
		t.Fatal("UNAVAILABLE ended the stream for good")
	}
}

func TestAssignmentFromProto(t *testing.T) {
	a := assignmentFromProto(&policydv1.Assignment{Ttl: durationpb.New(-time.Second), Hold: durationpb.New(2 * time.Second),
		AdmitFraction: math.NaN(), Reason: "r\xff", Fallback: &policydv1.Fallback{}, ParkHint: durationpb.New(3 * time.Second)})
	if a.ttl != 0 || a.hold != 2*time.Second || a.stop != 0 || a.admitFraction != 1 || a.fallback != nil || a.reason != "r\uFFFD" ||
		a.parkHint != 3*time.Second {
		t.Fatalf("%+v", a)
	}
	for in, want := range map[float64]float64{-1: 0, 0.25: 0.25, 7: 1, math.Inf(1): 1} {
		if got := assignmentFromProto(&policydv1.Assignment{AdmitFraction: in}).admitFraction; got != want {
			t.Errorf("admit fraction %v → %v, want %v", in, got, want)
		}
	}
	if a.hasPacePermits {
		t.Fatal("an assignment without pace_permits gave the gate grants")
	}
	if g := assignmentFromProto(&policydv1.Assignment{PacePermits: proto.Uint64(0)}); !g.hasPacePermits || g.pacePermits != 0 {
		t.Fatalf("pace_permits 0 is a count (grants, none yet), not its absence: %+v", g)
	}
	if g := assignmentFromProto(&policydv1.Assignment{PacePermits: proto.Uint64(7)}); g.pacePermits != 7 {
		t.Fatalf("pace_permits 7 → %d", g.pacePermits)
	}
	fb := assignmentFromProto(&policydv1.Assignment{Fallback: &policydv1.Fallback{Kind: policydv1.FallbackKind_FALLBACK_KIND_OTHER_MODEL,
		Provider: "openai", Model: "gpt-4o-mini"}}).fallback
	if fb == nil || fb.kind != FallbackOtherModel || fb.model != "gpt-4o-mini" {
		t.Fatalf("fallback %+v", fb)
	}
}

func TestRateLimitHeaders(t *testing.T) {
	h := http.Header{
		"X-Ratelimit-Limit-Requests":         {"600"},
		"Anthropic-Ratelimit-Requests-Limit": {"50", "60"},
		"X-Ratelimit-":                       {"1"},
		"Content-Type":                       {"application/json"},
		"X-Ratelimit-Reset-Tokens":           {strings.Repeat("9", 100)},
	}
	got := rateLimitHeaders(h)
	// A value longer than policyd accepts is dropped: clipped, it would misstate the limit.
	want := map[string]string{"x-ratelimit-limit-requests": "600", "anthropic-ratelimit-requests-limit": "50, 60"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s = %q, want %q", k, got[k], v)
		}
	}
	many := http.Header{}
	for i := range 40 {
		many[fmt.Sprintf("X-Ratelimit-H%02d", i)] = []string{"v"}
	}
	if got := rateLimitHeaders(many); len(got) != 16 || got["x-ratelimit-h00"] != "v" || got["x-ratelimit-h16"] != "" {
		t.Fatalf("%d headers kept (%v), want the first 16 by name", len(got), got)
	}
	if rateLimitHeaders(http.Header{"Content-Type": {"x"}}) != nil || rateLimitHeaders(nil) != nil {
		t.Fatal("no rate-limit header: want nil")
	}
}

// Only the failures the daemon's breakers count are reported as decided
// locally: a bad request decided while policyd was away opens no breaker.
func TestBreakerCountsOnlyAvailabilityFailures(t *testing.T) {
	for ft, want := range map[FailureType]bool{
		FailureTypeOverloaded: true, FailureTypeServerError: true, FailureTypeTimeout: true, FailureTypeConnectionError: true,
		FailureTypeRateLimit: false, FailureTypeAuthInvalid: false, FailureTypeInvalidRequest: false, FailureTypeUnknown: false,
	} {
		if got := breakerCounts(ft); got != want {
			t.Errorf("%v: %v, want %v", ft, got, want)
		}
	}
}

// drawRand returns its draws in order, the last one from then on.
type drawRand struct{ draws []float64 }

func (r *drawRand) Float64() float64 {
	d := r.draws[0]
	if len(r.draws) > 1 {
		r.draws = r.draws[1:]
	}
	return d
}

// The stream's report interval and reconnect backoff draw from the
// client's random source (WithRand), so a test (or a caller) controls them.
func TestStreamJitterFromWithRand(t *testing.T) {
	r := &drawRand{draws: []float64{0, 0.5, 1, 0.5}}
	c := newClient(nil, newConfig([]Option{WithRand(r), WithLogger(slog.New(slog.DiscardHandler))}))
	co := &coordinator{c: c, ctx: context.Background()}
	for _, want := range []time.Duration{900 * time.Millisecond, time.Second, 1100 * time.Millisecond} {
		if got := co.reportInterval(); got != want {
			t.Fatalf("report interval = %v, want %v", got, want)
		}
	}
	if got, want := co.reconnectWait(3), 2*time.Second; got != want { // half of the 4 s ceiling after three failures
		t.Fatalf("reconnect wait = %v, want %v", got, want)
	}
}

// A first attempt the gate sends to the assignment's fallback is shed and
// fell back; a report's fell_back is at most its shed, both within what
// policyd accepts.
func TestReportsCountFallBacksWithinShed(t *testing.T) {
	co, clock := testCoordinator(t)
	g := co.c.gate
	a := target{provider: "openai", model: "a"}
	g.assign(clock.now, a, &assignment{ttl: time.Minute, breaker: policydv1.BreakerState_BREAKER_STATE_OPEN, admitFraction: 1,
		fallback: &gateFallback{kind: FallbackOtherModel, provider: "openai", model: "b"}})
	if v := g.check(clock.now, a, -1, gateCall{canFallBack: true}, constRand(0.5), 0); v.action != gateFallBack {
		t.Fatalf("verdict %v, want the fallback", v.action)
	}
	if v := g.check(clock.now, a, -1, gateCall{}, constRand(0.5), -1); v.action != gateStop {
		t.Fatalf("verdict %v, want a stop (no fallback for the caller, parking off)", v.action)
	}
	s := &fakeStream{}
	if err := co.sendReports(s, reportActive); err != nil {
		t.Fatal(err)
	}
	if u := usageOf(t, s.sent[0], "a"); u.GetShed() != 2 || u.GetFellBack() != 1 || u.GetAdmitted() != 0 {
		t.Fatalf("usage %v: want 2 shed, 1 of them fell back", u)
	}
	// 600 admitted, then 900 sent to the fallback: the report's shed is cut
	// to the 400 left of the 1,000 a report carries, fell_back with it.
	g.assign(clock.now, a, nil)
	for range 600 {
		g.check(clock.now, a, -1, gateCall{}, constRand(0.5), 0)
	}
	g.assign(clock.now, a, &assignment{ttl: time.Minute, breaker: policydv1.BreakerState_BREAKER_STATE_OPEN, admitFraction: 1,
		fallback: &gateFallback{kind: FallbackOtherModel, provider: "openai", model: "b"}})
	for range 900 {
		g.check(clock.now, a, -1, gateCall{canFallBack: true}, constRand(0.5), 0)
	}
	clock.now = clock.now.Add(time.Second)
	if err := co.sendReports(s, reportActive); err != nil {
		t.Fatal(err)
	}
	if u := usageOf(t, s.sent[1], "a"); u.GetAdmitted() != 600 || u.GetShed() != 400 || u.GetFellBack() != 400 {
		t.Fatalf("usage %v: want 600 admitted, 400 shed and 400 fell back", u)
	}
}

// What responses said their calls used, with those calls' estimates, goes
// with the next report that counts an attempt (policyd bounds the tokens
// by them): each at most 2,000,000 a call, and within the bound of the
// report's attempts; a report that could not be sent gives them to the next.
func TestReportsCarryUsageWithinBounds(t *testing.T) {
	co, clock := testCoordinator(t)
	g := co.c.gate
	a := target{provider: "openai", model: "a"}
	g.check(clock.now, a, -1, gateCall{inputTokens: 100}, constRand(0), -1)
	g.record(clock.now, a, true)
	g.recordUsage(clock.now, a, 5e6, 3e6) // one call: each clipped to 2,000,000
	failing := &fakeStream{fail: errors.New("down")}
	if err := co.sendReports(failing, reportActive); err == nil {
		t.Fatal("the failing stream sent")
	}
	s := &fakeStream{}
	if err := co.sendReports(s, reportActive); err != nil {
		t.Fatal(err)
	}
	if u := usageOf(t, s.sent[0], "a"); u.GetInputTokensUsed() != 2_000_000 || u.GetInputTokensEstimatedForUsed() != 2_000_000 {
		t.Errorf("usage %v: want 2,000,000 used and estimated, kept through the failed send", u)
	}
	// A usage read after the report that counted its call is no activity
	// alone, and a report without an attempt (here the in-flight gauge's)
	// leaves it for the next attempt's.
	g.recordUsage(clock.now, a, 10, 8)
	if err := co.sendReports(s, reportActive); err != nil || len(s.sent) != 1 {
		t.Fatalf("sent %d messages (%v), want none for a usage alone", len(s.sent)-1, err)
	}
	g.flight(clock.now, a, true)
	if err := co.sendReports(s, reportActive); err != nil || len(s.sent) != 2 {
		t.Fatalf("sent %d messages (%v), want 2", len(s.sent), err)
	}
	if u := usageOf(t, s.sent[1], "a"); u.GetInputTokensUsed() != 0 || u.GetInputTokensEstimatedForUsed() != 0 {
		t.Errorf("usage %v: want no tokens without an attempt", u)
	}
	g.countRetry(clock.now, a, 10)
	if err := co.sendReports(s, reportActive); err != nil || len(s.sent) != 3 {
		t.Fatalf("sent %d messages (%v), want 3", len(s.sent), err)
	}
	if u := usageOf(t, s.sent[2], "a"); u.GetRetries() != 1 || u.GetInputTokensUsed() != 10 || u.GetInputTokensEstimatedForUsed() != 8 {
		t.Errorf("usage %v: want the retry with the usage left for it, 10 for 8", u)
	}
	// Two calls' usage with one attempt: within 2,000,000 for it.
	g.countRetry(clock.now, a, 10)
	g.recordUsage(clock.now, a, 1_500_000, 1_200_000)
	g.recordUsage(clock.now, a, 1_500_000, 1_200_000)
	if err := co.sendReports(s, reportActive); err != nil {
		t.Fatal(err)
	}
	if u := usageOf(t, s.sent[3], "a"); u.GetInputTokensUsed() != 2_000_000 || u.GetInputTokensEstimatedForUsed() != 2_000_000 {
		t.Errorf("usage %v: want both at the bound of one attempt", u)
	}
}
