package policyd_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	policyd "github.com/policyd/policyd/clients/go"
	policydv1 "github.com/policyd/policyd/clients/go/internal/gen/policyd/v1"
)

// The fleet gate against a real policyd (docs/clients.md, "The fleet
// gate"): the daemon's Coordinate stream assigns, this client's gate
// admits, waits, falls back or stops first attempts. The 29 shared vectors
// are gate_vectors_test.go's.

// gateDaemon starts a policyd with fleet memory on and policyYAML as its
// policy file; the test stops it at the end (a test may stop it sooner).
func gateDaemon(t *testing.T, policyYAML string, extra ...string) *daemon {
	t.Helper()
	policydBin(t)
	args := []string{"--fleet", "on"}
	if policyYAML != "" {
		file := filepath.Join(t.TempDir(), "policy.yaml")
		if err := os.WriteFile(file, []byte(policyYAML), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--policy", file)
	}
	d, err := startDaemon("127.0.0.1:0", "", append(args, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.stop)
	if policyYAML != "" {
		d.policy = args[len(args)-1]
	}
	return d
}

// rawGRPC is a plain connection to addr, closed at the end of the test.
func rawGRPC(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// kill ends the daemon at once, as a crash would.
func (d *daemon) kill() { d.Kill() }

// waitFor polls cond every 20 ms until it holds, or fails the test after
// timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// gpt4o is the call the gate tests make.
var gpt4o = policyd.Call{Provider: "openai", Model: "gpt-4o", KeyID: "k1", Operation: "chat"}

// countingOp is an operation that succeeds (or returns err) and counts its runs.
type countingOp struct {
	runs atomic.Int32
	err  error
}

func (o *countingOp) fn(ctx context.Context, attempt int) error {
	o.runs.Add(1)
	return o.err
}

// subscribe makes one successful call on call's target and waits until the
// gate holds the daemon's assignment for it.
func subscribe(t *testing.T, c *policyd.Client, call policyd.Call) {
	t.Helper()
	if err := c.Do(context.Background(), call, func(context.Context, int) error { return nil }); err != nil {
		t.Fatalf("first call: %v", err)
	}
	waitFor(t, 5*time.Second, "the first assignment", func() bool {
		_, _, ok := policyd.GateState(c, call)
		return ok
	})
}

// failures sends n NextDelay failures for provider/model, as n agents'
// retries would, straight to the daemon.
func failures(t *testing.T, addr string, n int, f *policydv1.Failure) {
	t.Helper()
	pc, _ := rawClients(t, addr)
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := pc.NextDelay(ctx, &policydv1.NextDelayRequest{Failure: f, Attempt: 1, ClientId: fmt.Sprintf("other-agent-%d", i)})
		cancel()
		if err != nil {
			t.Fatalf("NextDelay: %v", err)
		}
	}
}

var overloaded = &policydv1.Failure{Provider: "openai", Model: "gpt-4o", HttpStatus: 503, Body: fleetOverloadedBody}

// openBreaker opens openai/gpt-4o's breaker and waits until c's gate knows.
func openBreaker(t *testing.T, addr string, c *policyd.Client) {
	t.Helper()
	failures(t, addr, 3, overloaded)
	waitFor(t, 5*time.Second, "an OPEN assignment", func() bool {
		b, _, _ := policyd.GateState(c, gpt4o)
		return b == "OPEN"
	})
}

const breakerPolicy = `
fleet:
  breaker: {min_volume: 3, min_clients: 1}
fallbacks:
  openai/gpt-4o: [openai/gpt-4o-mini]
`

// silentAddr is a loopback address that accepts connections and never
// answers: a hung daemon.
func silentAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, conn)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		for _, c := range held {
			c.Close()
		}
	})
	return l.Addr().String()
}

// A target's first call waits for its first assignment, briefly: a daemon
// that does not answer costs it at most 100 ms, and the call is admitted
// without an assignment; later calls do not wait.
func TestGateAdmitsWithoutAssignment(t *testing.T) {
	t.Parallel()
	var rpcs rpcCounter
	c := newClient(t, silentAddr(t), rpcs.option())
	var op countingOp
	for i := range 3 {
		start := time.Now()
		if err := c.Do(context.Background(), gpt4o, op.fn); err != nil {
			t.Fatal(err)
		}
		took, limit := time.Since(start), 20*time.Millisecond
		if i == 0 {
			limit = 150 * time.Millisecond
			if took < 90*time.Millisecond {
				t.Errorf("the first call took %v: it did not wait for its first assignment", took)
			}
		}
		if took > limit {
			t.Errorf("call %d took %v, want at most %v", i, took, limit)
		}
	}
	if _, _, ok := policyd.GateState(c, gpt4o); ok || op.runs.Load() != 3 || len(rpcs.get()) != 0 {
		t.Fatalf("assigned %v, %d runs, RPCs %v; want no assignment, 3 runs and no unary RPC", ok, op.runs.Load(), rpcs.get())
	}
	// A call without a provider is not gated and opens nothing.
	c2 := newClient(t, silentAddr(t))
	if err := c2.Do(context.Background(), policyd.Call{Operation: "task"}, op.fn); err != nil || policyd.StreamStarted(c2) {
		t.Fatalf("a call without a provider: %v, stream started %v", err, policyd.StreamStarted(c2))
	}
}

// A short-lived process (a CLI run) is gated on its very first call: the
// call waits for the target's first assignment, which says OPEN.
func TestGateFirstCallIsGated(t *testing.T) {
	t.Parallel()
	d := gateDaemon(t, breakerPolicy)
	failures(t, d.addr, 3, overloaded) // other agents open the breaker
	var rpcs rpcCounter
	c := newClient(t, d.addr, rpcs.option(), policyd.WithParkLimit(0)) // parking off: it stops at once
	var op countingOp
	start := time.Now()
	err := c.Do(context.Background(), gpt4o, op.fn)
	var pe *policyd.Error
	if !errors.As(err, &pe) || pe.Decision.StopReason != policyd.StopCircuitOpen || op.runs.Load() != 0 || len(rpcs.get()) != 0 {
		t.Fatalf("a new process's first call = %v (%d runs, RPCs %v); want CIRCUIT_OPEN before any attempt", err, op.runs.Load(), rpcs.get())
	}
	if took := time.Since(start); took > 150*time.Millisecond {
		t.Errorf("the first call took %v, want at most the 100 ms wait for its assignment", took)
	}
	// Another model's first call gets its CLOSED assignment and goes.
	mini := policyd.Call{Provider: "openai", Model: "gpt-4o-mini", KeyID: "k1"}
	if err := c.Do(context.Background(), mini, op.fn); err != nil || op.runs.Load() != 1 {
		t.Fatalf("gpt-4o-mini: %v, %d runs", err, op.runs.Load())
	}
	if b, _, ok := policyd.GateState(c, mini); !ok || b != "CLOSED" {
		t.Fatalf("gpt-4o-mini's assignment: %q %v, want CLOSED right after its first call", b, ok)
	}
}

func TestGateBreakerOpenStops(t *testing.T) {
	t.Parallel()
	d := gateDaemon(t, breakerPolicy)
	var rpcs rpcCounter
	var decided decisions
	c := newClient(t, d.addr, rpcs.option(), decided.option(), policyd.WithParkLimit(0)) // parking off: it stops at once
	subscribe(t, c, gpt4o)
	openBreaker(t, d.addr, c)

	var op countingOp
	err := c.Do(context.Background(), gpt4o, op.fn)
	var pe *policyd.Error
	if !errors.As(err, &pe) || !errors.Is(err, policyd.ErrNotAdmitted) {
		t.Fatalf("Do = %v, want a *policyd.Error matching ErrNotAdmitted", err)
	}
	if pe.Decision.StopReason != policyd.StopCircuitOpen || pe.Attempts != 0 || op.runs.Load() != 0 {
		t.Fatalf("stop reason %v, %d attempts, %d runs; want CIRCUIT_OPEN before any attempt", pe.Decision.StopReason, pe.Attempts, op.runs.Load())
	}
	if len(rpcs.get()) != 0 || len(decided.get()) != 0 {
		t.Fatalf("RPCs %v, decisions %v: a gate stop asks nothing", rpcs.get(), decided.get())
	}
	msg := err.Error()
	for _, want := range []string{"CIRCUIT_OPEN", "breaker open", "openai/gpt-4o@k1", "fleet gate"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	if pe.Decision.Fleet == nil || pe.Decision.Fleet.Breaker != "OPEN" || !strings.Contains(pe.Decision.Fleet.Reason, "breaker open") {
		t.Errorf("Decision.Fleet = %+v, want the OPEN breaker and the assignment's reason", pe.Decision.Fleet)
	}
	// Another model is not gated by gpt-4o's breaker.
	if err := c.Do(context.Background(), policyd.Call{Provider: "openai", Model: "gpt-4o-mini", KeyID: "k1"}, op.fn); err != nil || op.runs.Load() != 1 {
		t.Fatalf("gpt-4o-mini: %v, %d runs", err, op.runs.Load())
	}
}

func TestGateFallsBackToTheAssignmentsFallback(t *testing.T) {
	t.Parallel()
	d := gateDaemon(t, breakerPolicy)
	var rpcs rpcCounter
	c := newClient(t, d.addr, rpcs.option())
	subscribe(t, c, gpt4o)
	openBreaker(t, d.addr, c)

	var got []policyd.Fallback
	model := "gpt-4o"
	call := gpt4o
	call.Fallback = func(ctx context.Context, call policyd.Call, fb policyd.Fallback) (policyd.Call, error) {
		got = append(got, fb)
		model, call.Provider, call.Model = fb.Model, fb.Provider, fb.Model
		return call, nil
	}
	var ranWith []string
	err := c.Do(context.Background(), call, func(ctx context.Context, attempt int) error {
		ranWith = append(ranWith, fmt.Sprintf("%d:%s", attempt, model))
		return nil
	})
	if err != nil {
		t.Fatalf("Do = %v", err)
	}
	if len(got) != 1 || got[0].Provider != "openai" || got[0].Model != "gpt-4o-mini" || got[0].Kind != policyd.FallbackOtherModel ||
		got[0].Decision.StopReason != policyd.StopCircuitOpen || !errors.Is(got[0].Err, policyd.ErrNotAdmitted) {
		t.Fatalf("fallbacks = %+v, want one to openai/gpt-4o-mini (OTHER_MODEL) for CIRCUIT_OPEN", got)
	}
	if len(ranWith) != 1 || ranWith[0] != "1:gpt-4o-mini" || len(rpcs.get()) != 0 {
		t.Fatalf("attempts %v, RPCs %v; want one first attempt on gpt-4o-mini and no RPC", ranWith, rpcs.get())
	}
}

func TestGateHoldWaits(t *testing.T) {
	t.Parallel()
	d := gateDaemon(t, "")
	c := newClient(t, d.addr)
	subscribe(t, c, gpt4o)
	failures(t, d.addr, 1, &policydv1.Failure{Provider: "openai", Model: "gpt-4o", KeyId: "k1", HttpStatus: 429,
		Headers: map[string]string{"retry-after": "2"},
		Body:    `{"error":{"message":"Rate limit reached for gpt-4o. Please try again later.","type":"requests","code":"rate_limit_exceeded"}}`})
	var hold time.Duration
	waitFor(t, 5*time.Second, "a hold", func() bool {
		_, hold, _ = policyd.GateState(c, gpt4o)
		return hold > 0
	})
	if hold < 1500*time.Millisecond || hold > 5*time.Second {
		t.Fatalf("hold %v, want about the 2 s Retry-After", hold)
	}
	start := time.Now()
	var waited time.Duration
	if err := c.Do(context.Background(), gpt4o, func(context.Context, int) error {
		waited = time.Since(start)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if waited < time.Second || waited > hold+time.Second {
		t.Fatalf("the first attempt went after %v; want about the hold (%v)", waited, hold)
	}

	// A deadline shorter than the hold stops at once: DEADLINE, no attempt.
	failures(t, d.addr, 1, &policydv1.Failure{Provider: "openai", Model: "gpt-4o", KeyId: "k1", HttpStatus: 429,
		Headers: map[string]string{"retry-after": "3"}})
	waitFor(t, 5*time.Second, "a second hold", func() bool {
		_, hold, _ = policyd.GateState(c, gpt4o)
		return hold > 2*time.Second
	})
	var op countingOp
	call := gpt4o
	call.Timeout = 200 * time.Millisecond
	start = time.Now()
	err := c.Do(context.Background(), call, op.fn)
	var pe *policyd.Error
	if !errors.As(err, &pe) || pe.Decision.StopReason != policyd.StopDeadline || op.runs.Load() != 0 || time.Since(start) > 100*time.Millisecond {
		t.Fatalf("Do with a 200ms timeout = %v after %v (%d runs); want a DEADLINE stop at once", err, time.Since(start), op.runs.Load())
	}
}

func TestGateDaemonDownAdmits(t *testing.T) {
	t.Parallel()
	c := newClient(t, closedAddr(t))
	var op countingOp
	for i := range 20 {
		start := time.Now()
		if err := c.Do(context.Background(), gpt4o, op.fn); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > 100*time.Millisecond {
			t.Fatalf("call %d took %v with policyd down; the gate must not wait for a stream that is down", i, took)
		}
	}
	if op.runs.Load() != 20 {
		t.Fatalf("%d runs, want 20", op.runs.Load())
	}
}

// An OPEN assignment outlives the daemon by its ttl plus the grace; then
// every first attempt goes (policyd away never stops an agent), and the
// process's own budget limits the retries the fail-open policy decides: it
// allows them while more than 5 of its 10 tokens are left, and each
// failure takes one.
func TestGateExpiryLimitsOnlyRetries(t *testing.T) {
	t.Parallel()
	d := gateDaemon(t, "fleet:\n  breaker: {min_volume: 3, min_clients: 1}\n  stream: {ttl: 1s}\n")
	c := newClient(t, d.addr, policyd.WithGateGrace(time.Second), policyd.WithDaemonTimeout(300*time.Millisecond), policyd.WithParkLimit(0))
	subscribe(t, c, gpt4o)
	openBreaker(t, d.addr, c)
	d.kill()

	var op countingOp
	var pe *policyd.Error
	if err := c.Do(context.Background(), gpt4o, op.fn); !errors.As(err, &pe) || pe.Decision.StopReason != policyd.StopCircuitOpen {
		t.Fatalf("right after the daemon died: %v, want the kept assignment's CIRCUIT_OPEN", err)
	}
	// ttl 1s + grace 1s after the last refresh: first attempts go.
	waitFor(t, 5*time.Second, "the expired assignment to admit", func() bool {
		return c.Do(context.Background(), gpt4o, op.fn) == nil
	})
	// A 503 is retried by the fail-open policy while the budget allows:
	// each call's first attempt is sent, whatever the budget.
	failing := &countingOp{err: &policyd.HTTPError{Response: &http.Response{StatusCode: 503, Header: http.Header{}}}}
	var budgetStops int
	for i := range 8 {
		before := failing.runs.Load()
		err := c.Do(context.Background(), gpt4o, failing.fn)
		if errors.Is(err, policyd.ErrNotAdmitted) || failing.runs.Load() == before {
			t.Fatalf("call %d: its first attempt was not sent: %v", i, err)
		}
		if errors.As(err, &pe) && pe.Decision.StopReason == policyd.StopRetryBudgetExhausted {
			budgetStops++
			if pe.Decision.Fleet == nil || !pe.Decision.Fleet.BudgetExhausted {
				t.Fatalf("a budget stop without the fleet's BudgetExhausted: %+v", pe.Decision)
			}
		}
	}
	if budgetStops < 5 {
		t.Fatalf("%d of 8 failing calls stopped by the own budget after %d attempts; want at least 5", budgetStops, failing.runs.Load())
	}
}

func TestGateReportsReachTheDaemon(t *testing.T) {
	t.Parallel()
	d := gateDaemon(t, "")
	c := newClient(t, d.addr)
	for range 3 {
		if err := c.Do(context.Background(), gpt4o, func(context.Context, int) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	c.ObserveRateLimits(gpt4o, http.Header{"X-Ratelimit-Limit-Requests": {"600"}, "X-Ratelimit-Remaining-Requests": {"599"},
		"Content-Type": {"application/json"}})
	fc := policydv1.NewFleetServiceClient(rawGRPC(t, d.addr))
	var av, rl *policydv1.Bucket
	waitFor(t, 5*time.Second, "the report in FleetService", func() bool {
		resp, err := fc.ListBuckets(context.Background(), &policydv1.ListBucketsRequest{Provider: "openai"})
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range resp.GetBuckets() {
			switch b.GetState().GetBucket() {
			case "availability:openai/gpt-4o":
				av = b
			case "rate_limit:openai/gpt-4o@k1":
				rl = b
			}
		}
		return av.GetFirstAttemptsAdmitted() >= 3 && av.GetSuccesses() >= 3 && rl.GetRequestsPerMinute() > 0
	})
	if av.GetReports() == 0 || av.GetStreamingClients() != 1 || rl.GetRequestsPerMinute() != 600 {
		t.Fatalf("availability bucket %v, rate-limit bucket %v; want reports from 1 streaming client and 600 requests a minute", av, rl)
	}
}

// Whatever a caller passes, the client neither crashes nor loses its
// stream: targets policyd would refuse are clipped or not reported.
func TestGateBadInput(t *testing.T) {
	t.Parallel()
	d := gateDaemon(t, breakerPolicy)
	var logs logBuffer
	c := newClient(t, d.addr, policyd.WithLogger(logs.logger()), policyd.WithProfile("no-such-profile"))
	var op countingOp
	bad := []policyd.Call{
		{Provider: "open\xffai", Model: "gpt-\xfe4o"},
		{Provider: strings.Repeat("p", 10<<10), Model: strings.Repeat("m", 10<<10), KeyID: strings.Repeat("k", 300)},
		{Provider: "OpenAI", Model: "GPT-4o"},
		{Provider: "openai", KeyID: "é" + strings.Repeat("x", 200)},
	}
	for _, call := range bad {
		if err := c.Do(context.Background(), call, op.fn); err != nil {
			t.Fatalf("%.40q: %v", call.Provider, err)
		}
		c.ObserveRateLimits(call, http.Header{"X-Ratelimit-Limit-Requests": {strings.Repeat("9", 100)}, "X-Ratelimit-": {"1"}})
	}
	many := http.Header{}
	for i := range 40 {
		many[fmt.Sprintf("X-Ratelimit-H%02d", i)] = []string{strings.Repeat("v", 100)}
	}
	c.ObserveRateLimits(gpt4o, many)
	c.ObserveRateLimits(gpt4o, nil)
	c.ObserveRateLimits(policyd.Call{}, many)
	// The stream survives it all (an unknown profile included: the client
	// drops it): gpt-4o is assigned.
	subscribe(t, c, gpt4o)
	if op.runs.Load() != int32(len(bad)) {
		t.Fatalf("%d runs, want %d", op.runs.Load(), len(bad))
	}
}

// With --fleet off the stream answers FAILED_PRECONDITION: the gate admits
// everything, and the client neither retries the stream nor warns.
func TestGateFleetOff(t *testing.T) {
	t.Parallel()
	d, err := startDaemon("127.0.0.1:0", "", "--fleet", "off")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.stop)
	var logs logBuffer
	c := newClient(t, d.addr, policyd.WithLogger(logs.logger()))
	var op countingOp
	if err := c.Do(context.Background(), gpt4o, op.fn); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the gate to turn off", func() bool { return policyd.GateOff(c) })
	for range 5 {
		if err := c.Do(context.Background(), gpt4o, op.fn); err != nil {
			t.Fatal(err)
		}
	}
	if op.runs.Load() != 6 || logs.String() != "" {
		t.Fatalf("%d runs, logs %q; want 6 runs and no log", op.runs.Load(), logs.String())
	}
}

func TestGateOffOption(t *testing.T) {
	t.Parallel()
	d := gateDaemon(t, breakerPolicy)
	gated := newClient(t, d.addr)
	subscribe(t, gated, gpt4o)
	openBreaker(t, d.addr, gated)
	c := newClient(t, d.addr, policyd.WithFleetGate(false))
	var op countingOp
	if err := c.Do(context.Background(), gpt4o, op.fn); err != nil || op.runs.Load() != 1 || policyd.StreamStarted(c) {
		t.Fatalf("WithFleetGate(false) with the breaker open: %v, %d runs, stream %v; want the attempt sent, no stream",
			err, op.runs.Load(), policyd.StreamStarted(c))
	}
}

// Close ends the stream and every goroutine the client started, whatever
// the daemon's state: serving, gone, or accepting and never answering.
// Not parallel: goleak compares all goroutines.
func TestGateCloseLeaksNothing(t *testing.T) {
	d := gateDaemon(t, "")
	down, silent := closedAddr(t), silentAddr(t)
	ignore := goleak.IgnoreCurrent()
	for _, tc := range []struct{ name, addr string }{{"serving", d.addr}, {"down", down}, {"silent", silent}} {
		c, err := policyd.Dial(tc.addr)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Do(context.Background(), gpt4o, func(context.Context, int) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if tc.name == "serving" {
			waitFor(t, 5*time.Second, "the first assignment", func() bool { _, _, ok := policyd.GateState(c, gpt4o); return ok })
		} else {
			time.Sleep(300 * time.Millisecond) // the stream tries, and waits to try again
		}
		start := time.Now()
		c.Close()
		if took := time.Since(start); took > time.Second {
			t.Errorf("%s: Close took %v", tc.name, took)
		}
		// A closed client opens no stream again.
		_ = c.Do(context.Background(), gpt4o, func(context.Context, int) error { return nil })
		goleak.VerifyNone(t, ignore)
	}
}
