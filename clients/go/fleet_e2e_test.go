package policyd_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	policyd "github.com/policyd/policyd/clients/go"
	policydv1 "github.com/policyd/policyd/clients/go/internal/gen/policyd/v1"
)

// The fleet end to end: a real policyd process, agents as goroutines each
// with its own Client (its own client id), and a fake provider on
// 127.0.0.1. Short timings, from the policy file below, bound each run to a
// few seconds; docs/fleet-simulation.md has the simulation at full scale.
const fleetPolicy = `
profiles:
  fleet_e2e:
    extends: default
    strategies:
      OVERLOADED: {retry: true, max_attempts: 4, backoff: exponential, initial_delay: 100ms, max_delay: 1s, multiplier: 2,
                   jitter: full, honor_retry_after: true, retry_after_ceiling: 10s, fallback: none}
      RATE_LIMIT: {retry: true, max_attempts: 4, backoff: exponential, initial_delay: 100ms, max_delay: 1s, multiplier: 2,
                   jitter: full, honor_retry_after: true, retry_after_mode: override, retry_after_padding: 0.1,
                   retry_after_jitter: 0.1, retry_after_ceiling: 10s, fallback: none}
      TIMEOUT: {retry: true, max_attempts: 3, backoff: constant, initial_delay: 100ms}
fleet:
  breaker: {min_volume: 20, min_clients: 3, window: 5s, open_for: 2s, max_open_for: 4s, probe_interval: 200ms, close_after: 600ms}
  retry_budget: {burst: 10, floor: 2}
`

// fleetDaemon starts a policyd with fleetPolicy (or policy) and --fleet=mode.
func fleetDaemon(t *testing.T, mode string, policy ...string) string {
	t.Helper()
	policydBin(t)
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(append(policy, fleetPolicy)[0]), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := startDaemon("127.0.0.1:0", "", "--policy", file, "--fleet", mode)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.stop)
	return d.addr
}

// provider is a fake LLM API: answer decides each request's response,
// from the time and the attempt number post sends (attemptHeader; 0
// without it).
type provider struct {
	*httptest.Server
	mu       sync.Mutex
	attempts []time.Time
	answer   func(now time.Time, attempt int) (status int, headers map[string]string, body string)
}

// attemptHeader carries an agent's attempt number to the fake provider.
const attemptHeader = "X-Test-Attempt"

func newProvider(t *testing.T, answer func(now time.Time, attempt int) (int, map[string]string, string)) *provider {
	p := &provider{answer: answer}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		p.mu.Lock()
		p.attempts = append(p.attempts, now)
		p.mu.Unlock()
		attempt, _ := strconv.Atoi(r.Header.Get(attemptHeader))
		status, headers, body := p.answer(now, attempt)
		for k, v := range headers {
			w.Header().Set(k, v)
		}
		w.Header().Set("content-type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *provider) times() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.attempts...)
}

// fleetRun is what a run of agents did.
type fleetRun struct {
	logical     atomic.Int64
	stops       sync.Map // StopReason → *atomic.Int64
	nextDelays  atomic.Int64
	successes   atomic.Int64
	firstPassed atomic.Int64 // calls that succeeded on their first attempt
	// callTimeout is each call's deadline (0: 5 s).
	callTimeout time.Duration
}

func (r *fleetRun) stopped(reason policyd.StopReason) int64 {
	v, ok := r.stops.Load(reason)
	if !ok {
		return 0
	}
	return v.(*atomic.Int64).Load()
}

// post is attempt number attempt at the fake provider: a POST to url, its
// answer checked (policyd.CheckResponse).
func post(ctx context.Context, url string, attempt int) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	req.Header.Set(attemptHeader, strconv.Itoa(attempt))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return policyd.CheckResponse(resp)
}

// runAgents runs n agents against url until the context ends: each calls,
// thinks for think, and calls again.
func runAgents(ctx context.Context, t *testing.T, addr, url, keyID string, n int, think time.Duration, run *fleetRun) {
	timeout := cmp.Or(run.callTimeout, 5*time.Second)
	var wg sync.WaitGroup
	for i := range n {
		c := newClient(t, addr, policyd.WithClientID(fmt.Sprintf("agent-%d", i)), policyd.WithParkLimit(0),
			policyd.WithOnDecision(func(int, error, policyd.Decision) { run.nextDelays.Add(1) }))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				run.logical.Add(1)
				err := c.Do(ctx, policyd.Call{Provider: "openai", Model: "gpt-4o", KeyID: keyID, Operation: "chat",
					Method: "POST", Profile: "fleet_e2e", Timeout: timeout},
					func(ctx context.Context, attempt int) error {
						if err := post(ctx, url, attempt); err != nil {
							return err
						}
						if attempt == 1 {
							run.firstPassed.Add(1)
						}
						return nil
					})
				var pe *policyd.Error
				switch {
				case err == nil:
					run.successes.Add(1)
				case errors.As(err, &pe):
					v, _ := run.stops.LoadOrStore(pe.Decision.StopReason, new(atomic.Int64))
					v.(*atomic.Int64).Add(1)
				}
				select {
				case <-ctx.Done():
				case <-time.After(think):
				}
			}
		}()
	}
	wg.Wait()
}

const fleetOverloadedBody = `{"error":{"message":"The server is overloaded or not ready yet.","type":"server_error","param":null,"code":null}}`

// TestFleetOutageAmplification: during a full outage, the fleet's breaker
// and retry budget keep upstream attempts near one per logical call, where
// the same agents answered statelessly walk their four attempts.
func TestFleetOutageAmplification(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real agents for several seconds")
	}
	amp := map[string]float64{}
	for _, mode := range []string{"on", "off"} {
		addr := fleetDaemon(t, mode)
		p := newProvider(t, func(time.Time, int) (int, map[string]string, string) { return 503, nil, fleetOverloadedBody })
		run := &fleetRun{}
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
		runAgents(ctx, t, addr, p.URL, "k1", 60, 100*time.Millisecond, run)
		cancel()
		amp[mode] = float64(len(p.times())) / float64(run.logical.Load())
		t.Logf("fleet=%s: %d logical calls, %d upstream attempts, amplification %.2f, stops by circuit %d, by budget %d, attempts exhausted %d",
			mode, run.logical.Load(), len(p.times()), amp[mode], run.stopped(policyd.StopCircuitOpen),
			run.stopped(policyd.StopRetryBudgetExhausted), run.stopped(policyd.StopAttemptsExhausted))
		if mode == "on" && run.stopped(policyd.StopCircuitOpen) == 0 {
			t.Errorf("fleet on: no call stopped by the open breaker")
		}
	}
	if amp["on"] > 1.5 || amp["off"] < 2.5 {
		t.Fatalf("amplification with fleet memory %.2f (want ≤ 1.5), without %.2f (want ≥ 2.5)", amp["on"], amp["off"])
	}
}

// TestFleetHerdIsStaggered: agents told the same Retry-After come back
// spread over the release slots, not in the same instant.
func TestFleetHerdIsStaggered(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real agents for several seconds")
	}
	peak := map[string]int{}
	for _, mode := range []string{"on", "off"} {
		addr := fleetDaemon(t, mode)
		end := time.Now().Add(1500 * time.Millisecond) // the quota window resets here
		p := newProvider(t, func(now time.Time, _ int) (int, map[string]string, string) {
			if now.Before(end) {
				secs := int(math.Ceil(end.Sub(now).Seconds()))
				return 429, map[string]string{"retry-after": strconv.Itoa(secs)},
					`{"error":{"message":"Rate limit reached for gpt-4o. Please try again later.","type":"requests","code":"rate_limit_exceeded"}}`
			}
			return 200, nil, `{"ok":true}`
		})
		// The hold is the 2 s Retry-After and its waiters are released over
		// the next 3 s (1.5 × the hold): a call's deadline of 8 s leaves the
		// last slot room on a loaded machine.
		run := &fleetRun{callTimeout: 8 * time.Second}
		ctx, cancel := context.WithTimeout(context.Background(), 9*time.Second)
		runAgents(ctx, t, addr, p.URL, "k1", 60, 10*time.Second, run) // one call each
		cancel()
		// The largest number of attempts in any 200 ms after the window ends.
		var after []time.Time
		for _, at := range p.times() {
			if !at.Before(end) {
				after = append(after, at)
			}
		}
		sort.Slice(after, func(i, j int) bool { return after[i].Before(after[j]) })
		for i := range after {
			j := i
			for j < len(after) && after[j].Sub(after[i]) < 200*time.Millisecond {
				j++
			}
			peak[mode] = max(peak[mode], j-i)
		}
		stops := map[policyd.StopReason]int64{}
		run.stops.Range(func(k, v any) bool { stops[k.(policyd.StopReason)] = v.(*atomic.Int64).Load(); return true })
		t.Logf("fleet=%s: %d returned after the window, at most %d in 200 ms; %d of %d calls succeeded (stops %v)",
			mode, len(after), peak[mode], run.successes.Load(), run.logical.Load(), stops)
		if run.successes.Load() < 55 {
			t.Errorf("fleet=%s: only %d of %d calls succeeded", mode, run.successes.Load(), run.logical.Load())
		}
	}
	if peak["on"]*2 > peak["off"] {
		t.Fatalf("herd: at most %d attempts in 200 ms with fleet memory, %d without; want less than half", peak["on"], peak["off"])
	}
}

// TestFleetStopsARevokedKey: one agent's 401 stops the other agents on the
// same key; another key is untouched.
func TestFleetStopsARevokedKey(t *testing.T) {
	addr := fleetDaemon(t, "on")
	unauthorized := newProvider(t, func(time.Time, int) (int, map[string]string, string) {
		return 401, nil, `{"error":{"message":"Incorrect API key provided: sk-abc***xyz.","type":"invalid_request_error","code":"invalid_api_key"}}`
	})
	timeout := newProvider(t, func(time.Time, int) (int, map[string]string, string) {
		return 408, nil, `{"error":{"message":"Request timed out.","type":"timeout"}}`
	})
	call := func(url, key string, opts ...policyd.Option) error {
		c := newClient(t, addr, opts...)
		return c.Do(context.Background(), policyd.Call{Provider: "openai", Model: "gpt-4o", KeyID: key, Operation: "chat",
			Method: "POST", Profile: "fleet_e2e"}, func(ctx context.Context, _ int) error {
			resp, err := http.Post(url, "application/json", nil)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			return policyd.CheckResponse(resp)
		})
	}
	_ = call(unauthorized.URL, "revoked")
	var pe *policyd.Error
	// Without the gate, the first attempt goes and NextDelay stops the retry.
	if err := call(timeout.URL, "revoked", policyd.WithFleetGate(false)); !errors.As(err, &pe) || pe.Decision.StopReason != policyd.StopFleetStop ||
		pe.Decision.Fleet == nil || !pe.Decision.Fleet.Stopped || pe.Attempts != 1 {
		t.Fatalf("a timeout on the revoked key: %v (decision %+v), want a fleet stop after 1 attempt", err, pe)
	}
	// With it, the first attempt is not even sent.
	if err := call(timeout.URL, "revoked"); !errors.As(err, &pe) || !errors.Is(err, policyd.ErrNotAdmitted) ||
		pe.Decision.StopReason != policyd.StopFleetStop || !pe.Decision.Fleet.Stopped || pe.Attempts != 0 {
		t.Fatalf("a gated call on the revoked key: %v (decision %+v), want a fleet stop before any attempt", err, pe)
	}
	if err := call(timeout.URL, "healthy"); !errors.As(err, &pe) || pe.Decision.StopReason != policyd.StopAttemptsExhausted || pe.Attempts != 3 {
		t.Fatalf("a timeout on another key: %v, want its 3 attempts", err)
	}
}

// TestFleetNoRPCOnSuccess: calls that succeed never ask policyd.
func TestFleetNoRPCOnSuccess(t *testing.T) {
	addr := fleetDaemon(t, "on")
	p := newProvider(t, func(time.Time, int) (int, map[string]string, string) { return 200, nil, `{"ok":true}` })
	run := &fleetRun{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	runAgents(ctx, t, addr, p.URL, "k1", 50, 20*time.Millisecond, run)
	cancel()
	if run.successes.Load() < 50 || run.nextDelays.Load() != 0 {
		t.Fatalf("%d successes, %d decisions asked; want ≥ 50 and 0", run.successes.Load(), run.nextDelays.Load())
	}
}

// The fleet gate end to end: the same real policyd and fake provider, and
// agents whose clients keep a Coordinate stream and gate first attempts
// (docs/clients.md, "The fleet gate").

// gatePolicy is fleetPolicy's profile with a breaker that probes once a
// second for the whole fleet (the default) and re-opens for 2 s after a
// failed probe, and assignments that live 1 s, so that runs stay short.
const gatePolicy = `
profiles:
  fleet_e2e:
    extends: default
    strategies:
      OVERLOADED: {retry: true, max_attempts: 4, backoff: exponential, initial_delay: 100ms, max_delay: 1s, multiplier: 2,
                   jitter: full, honor_retry_after: true, retry_after_ceiling: 10s, fallback: none}
fleet:
  breaker: {min_volume: 20, min_clients: 3, window: 5s, open_for: 2s, max_open_for: 2s, probe_interval: 1s}
  retry_budget: {burst: 10, floor: 2}
  stream: {ttl: 1s}
`

// callRecord is one logical call of an agent.
type callRecord struct {
	start, end time.Time
	attempts   int
	err        error
	decisions  []policyd.Decision // what the decision hook saw, in order
}

func (r callRecord) gated() bool { return errors.Is(r.err, policyd.ErrNotAdmitted) }

func (r callRecord) stopReason() policyd.StopReason {
	var pe *policyd.Error
	if errors.As(r.err, &pe) {
		return pe.Decision.StopReason
	}
	return policyd.StopReasonUnspecified
}

// callLog is every logical call of a run.
type callLog struct {
	mu    sync.Mutex
	calls []callRecord
}

func (l *callLog) add(r callRecord) {
	l.mu.Lock()
	l.calls = append(l.calls, r)
	l.mu.Unlock()
}

func (l *callLog) get() []callRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]callRecord(nil), l.calls...)
}

// runGateAgents runs n agents against url until ctx ends, as runAgents
// does, logging every call and its decisions; each call has its own
// timeout.
func runGateAgents(ctx context.Context, t *testing.T, addr, url string, n int, think, timeout time.Duration, log *callLog,
	opts ...policyd.Option) []*policyd.Client {
	clients := make([]*policyd.Client, n)
	var wg sync.WaitGroup
	for i := range n {
		// The hook runs on the calling goroutine, the agent's: its calls
		// are one after the other.
		var decided []policyd.Decision
		hook := policyd.WithOnDecision(func(_ int, _ error, d policyd.Decision) { decided = append(decided, d) })
		c := newClient(t, addr, append([]policyd.Option{policyd.WithClientID(fmt.Sprintf("gate-agent-%d", i)), hook}, opts...)...)
		clients[i] = c
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				start, attempts := time.Now(), 0
				decided = nil
				err := c.Do(ctx, policyd.Call{Provider: "openai", Model: "gpt-4o", KeyID: "k1", Operation: "chat",
					Method: "POST", Profile: "fleet_e2e", Timeout: timeout},
					func(ctx context.Context, attempt int) error {
						attempts++
						return post(ctx, url, attempt)
					})
				log.add(callRecord{start: start, end: time.Now(), attempts: attempts, err: err, decisions: decided})
				select {
				case <-ctx.Done():
				case <-time.After(think):
				}
			}
		}()
	}
	wg.Wait()
	return clients
}

// countSince counts the times at or after from (and before to, if set).
func countSince(times []time.Time, from, to time.Time) int {
	n := 0
	for _, at := range times {
		if !at.Before(from) && (to.IsZero() || at.Before(to)) {
			n++
		}
	}
	return n
}

// TestFleetGateShedsOutage: in a full outage, once the breaker opens the
// gates stop first attempts before they are sent, so upstream attempts per
// logical call fall from about 1 (NextDelay alone cannot hold back a first
// attempt: TestFleetOutageAmplification) to the fleet's probes.
func TestFleetGateShedsOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real agents for several seconds")
	}
	d := gateDaemon(t, gatePolicy)
	p := newProvider(t, func(time.Time, int) (int, map[string]string, string) { return 503, nil, fleetOverloadedBody })
	var log callLog
	const agents, runFor = 30, 10 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), runFor)
	began := time.Now()
	runGateAgents(ctx, t, d.addr, p.URL, agents, 50*time.Millisecond, 5*time.Second, &log, policyd.WithParkLimit(0))
	cancel()
	ended := time.Now()

	calls, attempts := log.get(), p.times()
	// Detection: the first call a gate did not admit.
	var detected time.Time
	for _, c := range calls {
		if c.gated() && (detected.IsZero() || c.start.Before(detected)) {
			detected = c.start
		}
	}
	if detected.IsZero() {
		t.Fatalf("%d calls, %d attempts: no gate stopped a first attempt", len(calls), len(attempts))
	}
	settled := detected.Add(time.Second) // every stream has heard of the OPEN breaker
	var after, gated int
	var settledCalls, settledAttempts int
	stops := map[policyd.StopReason]int{}
	for _, c := range calls {
		if c.start.Before(detected) {
			continue
		}
		after++
		if c.gated() {
			gated++
			stops[c.stopReason()]++
		}
		if !c.start.Before(settled) {
			settledCalls++
			settledAttempts += c.attempts
		}
	}
	attemptsAfter := countSince(attempts, detected, time.Time{})
	amp := float64(attemptsAfter) / float64(after)
	// The calls under way at detection have their retries released by
	// NextDelay over the open period and one more (2 s + 2 s): from 5 s
	// after detection on, only the fleet's probes reach the provider.
	quiet := detected.Add(5 * time.Second)
	late, lateSecs := countSince(attempts, quiet, time.Time{}), ended.Sub(quiet).Seconds()

	t.Logf("detected %v into the outage; before: %d calls, %d upstream attempts; after: %d calls (%d not admitted: %v), "+
		"%d upstream attempts, amplification %.3f; calls from 1 s after detection: %d, with %d attempts; "+
		"upstream attempts from 5 s after detection: %d in %.1f s",
		detected.Sub(began).Round(time.Millisecond), len(calls)-after, len(attempts)-attemptsAfter, after, gated, stops,
		attemptsAfter, amp, settledCalls, settledAttempts, late, lateSecs)
	if detected.Sub(began) > 3*time.Second {
		t.Errorf("the breaker took %v to reach the gates", detected.Sub(began))
	}
	// Expected ≈ 0.01: 30 agents calling every ~50 ms make ~500 calls a
	// second, against the retries of the calls in flight at detection (at
	// most 4 attempts each, one call per agent) plus about a probe a
	// second. 0.1 is the goal, 10 times that; a gate that admitted first
	// attempts would score ≥ 1.
	if amp > 0.1 {
		t.Errorf("amplification after detection %.3f, want ≤ 0.1", amp)
	}
	// Calls that start once the streams have the OPEN assignment send only
	// the fleet's probes: one a second for the whole fleet (each followed
	// by at most its retries, which NextDelay stops on the re-opened
	// breaker), plus one for the partial second at either end.
	if limit := 2*int(ended.Sub(settled).Seconds()) + 2; settledAttempts > limit {
		t.Errorf("calls started from 1 s after detection sent %d attempts, want at most %d (probes)", settledAttempts, limit)
	}
	if limit := int(lateSecs) + 2; late > limit {
		t.Errorf("%d upstream attempts in the %.1f s from 5 s after detection, want at most %d (one probe a second)", late, lateSecs, limit)
	}
	if gated < after*9/10 {
		t.Errorf("%d of %d calls after detection stopped by the gate, want ≥ 90 %%", gated, after)
	}
}

// TestFleetGateDaemonRestart: policyd dies mid-outage and comes back a few
// seconds later on the same address. Meanwhile no call blocks past its
// deadline and calls keep flowing; once the assignments expire (ttl 1 s +
// grace 1 s) no gate refuses a first attempt (policyd away never stops an
// agent: the process's own budget limits only retries); after the restart
// every stream is back within 2 s and the new daemon's assignments stop
// first attempts again.
func TestFleetGateDaemonRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real agents for several seconds")
	}
	daemonRestart(t, restartCase{
		policy: gatePolicy, agents: 10, think: 50 * time.Millisecond, timeout: 2 * time.Second, down: 4 * time.Second,
		answer: func(time.Time, int) (int, map[string]string, string) { return 503, nil, fleetOverloadedBody },
		// The outage opens the breaker, and the gates stop first attempts.
		ready: func(calls []callRecord) bool { return !firstCircuitStop(calls, time.Time{}).IsZero() },
		// The new daemon's breaker opens on the agents' failures.
		again: firstCircuitStop,
	})
}

// TestFleetGateDaemonAwayLong: policyd is away for 40 s while the provider
// fails every call's first attempt (503, overloaded) and answers its
// retry. The fleet's breaker is open when policyd dies; once the gates'
// assignments expire no gate refuses a first attempt, and every call
// completes: its retry, decided by the fail-open policy, goes and
// succeeds. Then policyd comes back on the same address and every stream
// is back within 2 s, though the streams' own reconnect backoff has grown
// to its 30 s cap by then.
//
// The agents call every 6 s: the process's own retry budget (10 tokens, a
// failed attempt takes 1, a success gives 0.1, time 0.1 a second; the
// fail-open policy's retries go while more than 5 are left) keeps up with
// a call whose first attempt fails about every 9 s, after a burst of
// about five; calling every 6 s for 40 s stays within it, so a refused
// retry here is a fault (calling flat out, the budget would refuse
// retries after a few calls by design: TestGateExpiryLimitsOnlyRetries).
func TestFleetGateDaemonAwayLong(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real agents for about 45 s")
	}
	// Half the agents' attempts failing does not open the breaker (the
	// new daemon's stays closed); other agents' failures open it just
	// before policyd dies.
	policy := strings.Replace(gatePolicy, "min_clients: 3,", "min_clients: 3, failure_rate: 0.9,", 1)
	if policy == gatePolicy {
		t.Fatal("gatePolicy's breaker has no min_clients to set failure_rate next to")
	}
	const agents = 12
	run := daemonRestart(t, restartCase{
		policy: policy, agents: agents, think: 6 * time.Second, timeout: 5 * time.Second, down: 40 * time.Second,
		answer: func(_ time.Time, attempt int) (int, map[string]string, string) {
			if attempt == 1 {
				return 503, nil, fleetOverloadedBody
			}
			return 200, nil, `{"ok":true}`
		},
		// Every agent's first call is done: its gate has its assignment.
		ready: func(calls []callRecord) bool { return len(calls) >= agents },
		beforeKill: func(t *testing.T, addr string) {
			fc := policydv1.NewFleetServiceClient(rawGRPC(t, addr))
			sent := func() (int64, bool) {
				bs, err := fc.ListBuckets(context.Background(), &policydv1.ListBucketsRequest{Provider: "openai", Model: "gpt-4o"})
				if err != nil {
					t.Fatal(err)
				}
				for _, b := range bs.GetBuckets() {
					if b.GetScope() == "availability" {
						return b.GetAssignmentsSent(), b.GetState().GetBreaker() == policydv1.BreakerState_BREAKER_STATE_OPEN
					}
				}
				return 0, false
			}
			before, _ := sent()
			failures(t, addr, 200, overloaded)
			waitFor(t, 5*time.Second, "the OPEN breaker assigned to every agent", func() bool {
				n, open := sent()
				return open && n >= before+agents
			})
		},
	})
	var failed, unexpected, early int
	for _, c := range run.down {
		if !c.start.After(run.expired) {
			early++ // the kept OPEN assignment may stop it
			continue
		}
		if c.err != nil {
			failed++
			t.Errorf("a call while policyd was away failed after %d attempts: %v", c.attempts, c.err)
			continue
		}
		if c.attempts != 2 || len(c.decisions) != 1 || !c.decisions[0].FailOpen || c.decisions[0].Action != policyd.ActionRetry {
			unexpected++
			t.Errorf("a call while policyd was away: %d attempts, decisions %+v; want its retry, decided by the fail-open policy",
				c.attempts, c.decisions)
		}
	}
	t.Logf("policyd away %v: %d calls, %d before the assignments expired, and after: %d failed, %d not one fail-open retry",
		run.downFor.Round(time.Millisecond), len(run.down), early, failed, unexpected)
}

// restartCase is a run of agents while policyd dies and comes back on
// the same address (daemonRestart).
type restartCase struct {
	// policy is the policy file (its fleet_e2e profile is the calls'),
	// answer the provider's answer to each attempt.
	policy string
	answer func(now time.Time, attempt int) (int, map[string]string, string)
	agents int
	// think is each agent's pause between calls, timeout each call's
	// budget, down how long policyd is away.
	think, timeout, down time.Duration
	// ready says when policyd may die, after beforeKill (nil: nothing);
	// again (nil: not waited for), when the new daemon first assigned
	// something since its restart.
	ready      func(calls []callRecord) bool
	beforeKill func(t *testing.T, addr string)
	again      func(calls []callRecord, since time.Time) time.Time
}

// restartRun is what daemonRestart saw.
type restartRun struct {
	down    []callRecord // the calls that started after policyd died and ended before it was back
	downFor time.Duration
	expired time.Time // every assignment the gates kept has expired (ttl + grace, and a margin)
}

// daemonRestart runs rc's agents, kills policyd once rc.ready holds,
// restarts it rc.down later on the same address, and checks what holds
// whatever the provider does: no call blocks past its deadline, calls keep
// flowing, no gate refuses a first attempt once the assignments expired
// (ttl 1 s + grace 1 s), and every stream is back within 2 s of the
// restart.
func daemonRestart(t *testing.T, rc restartCase) restartRun {
	t.Helper()
	d := gateDaemon(t, rc.policy)
	addr := d.addr
	p := newProvider(t, rc.answer)
	var log callLog
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clientsCh := make(chan []*policyd.Client, 1)
	go func() {
		clientsCh <- runGateAgents(ctx, t, addr, p.URL, rc.agents, rc.think, rc.timeout, &log,
			policyd.WithGateGrace(time.Second), policyd.WithDaemonTimeout(500*time.Millisecond), policyd.WithParkLimit(0))
	}()

	waitFor(t, 10*time.Second, "the run ready for policyd to die", func() bool { return rc.ready(log.get()) })
	if rc.beforeKill != nil {
		rc.beforeKill(t, addr)
	}
	killed := time.Now()
	d.kill()
	time.Sleep(rc.down)
	d2, err := startDaemon(addr, "", "--fleet", "on", "--policy", d.policy)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d2.stop)
	restarted := time.Now()

	// Back: every stream reconnects (the connection redials every second
	// at most, and the stream waits for it), and the new daemon assigns
	// again.
	var again, allBack time.Time
	fc := policydv1.NewFleetServiceClient(rawGRPC(t, addr))
	streaming := int32(0)
	waitFor(t, 20*time.Second, "every stream back after the restart", func() bool {
		if again.IsZero() && rc.again != nil {
			again = rc.again(log.get(), restarted)
		}
		bs, err := fc.ListBuckets(context.Background(), &policydv1.ListBucketsRequest{Provider: "openai", Model: "gpt-4o"})
		if err == nil {
			for _, b := range bs.GetBuckets() {
				streaming = max(streaming, b.GetStreamingClients())
			}
		}
		if allBack.IsZero() && streaming >= int32(rc.agents) {
			allBack = time.Now()
		}
		return (rc.again == nil || !again.IsZero()) && !allBack.IsZero()
	})
	back := allBack.Sub(restarted)
	cancel()
	for _, c := range <-clientsCh {
		c.Close() // before d2 stops: policyd's graceful stop waits for open streams
	}

	calls, attempts := log.get(), p.times()
	// The last assignment's ttl + grace, at the latest, and a margin.
	run := restartRun{downFor: restarted.Sub(killed), expired: killed.Add(2*time.Second + 100*time.Millisecond)}
	var longest time.Duration
	var budgetStops, refused int
	for _, c := range calls {
		longest = max(longest, c.end.Sub(c.start))
		if c.start.After(killed) && c.end.Before(restarted) {
			run.down = append(run.down, c)
			if c.stopReason() == policyd.StopRetryBudgetExhausted {
				budgetStops++
			}
			if c.gated() && c.start.After(run.expired) {
				refused++
			}
		}
	}
	ownAdmitted := countSince(attempts, run.expired, restarted)
	againText := "not awaited"
	if !again.IsZero() {
		againText = again.Sub(restarted).Round(time.Millisecond).String() + " later"
	}
	t.Logf("down %v: %d calls finished, %d first attempts refused by the gate after the assignments expired, %d retries refused by "+
		"the own budget, %d attempts after the assignments expired; after the restart: assignments again %s, all %d streams back %v later; "+
		"longest call %v (timeout %v)",
		run.downFor.Round(time.Millisecond), len(run.down), refused, budgetStops, ownAdmitted, againText, streaming, back.Round(time.Millisecond),
		longest.Round(time.Millisecond), rc.timeout)
	if refused > 0 {
		t.Errorf("%d first attempts refused by the gate while policyd was away; want 0", refused)
	}
	if back > 2*time.Second {
		t.Errorf("the streams were back %v after policyd; want within 2 s", back.Round(time.Millisecond))
	}
	if longest > rc.timeout+300*time.Millisecond {
		t.Errorf("a call took %v, past its %v deadline", longest, rc.timeout)
	}
	if len(run.down) < rc.agents*5 {
		t.Errorf("only %d calls finished in the %v policyd was down; calls must keep flowing", len(run.down), rc.down)
	}
	if ownAdmitted == 0 {
		t.Errorf("while policyd was down: no attempt after the assignments expired")
	}
	return run
}

// firstCircuitStop is the start of the first call from since on that a
// gate stopped for an open breaker (zero: none).
func firstCircuitStop(calls []callRecord, since time.Time) time.Time {
	var first time.Time
	for _, c := range calls {
		if c.start.After(since) && c.gated() && c.stopReason() == policyd.StopCircuitOpen && (first.IsZero() || c.start.Before(first)) {
			first = c.start
		}
	}
	return first
}

// TestFleetGateParksThroughOutage: the provider is down for about 10 s.
// Once the breaker opens, a first attempt that meets it parks in its
// client (no upstream attempt, no RPC) instead of failing; the fleet's
// probes (about one a second) find the provider back, the breaker closes,
// and the parked calls complete. Calls arrive independently (a goroutine
// each, 30 s deadlines), as requests to a service do.
func TestFleetGateParksThroughOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real agents for about 20 s")
	}
	d := gateDaemon(t, gatePolicy)
	began := time.Now()
	const healthy, outage = 2 * time.Second, 10 * time.Second
	downAt, upAt := began.Add(healthy), began.Add(healthy+outage)
	p := newProvider(t, func(now time.Time, _ int) (int, map[string]string, string) {
		if !now.Before(downAt) && now.Before(upAt) {
			return 503, nil, fleetOverloadedBody
		}
		return 200, nil, "{}"
	})
	const agents, every, deadline = 5, 100 * time.Millisecond, 30 * time.Second
	var log callLog
	var parks atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range agents {
		c := newClient(t, d.addr, policyd.WithClientID(fmt.Sprintf("park-agent-%d", i)),
			policyd.WithOnDecision(func(attempt int, _ error, d policyd.Decision) {
				if attempt == 0 && d.Parked && d.Waited == 0 {
					parks.Add(1)
				}
			}))
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(every)
			defer tick.Stop()
			for ctx.Err() == nil && time.Now().Before(upAt.Add(6*time.Second)) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					start, attempts := time.Now(), 0
					err := c.Do(context.Background(), policyd.Call{Provider: "openai", Model: "gpt-4o", KeyID: "k1", Operation: "chat",
						Method: "POST", Profile: "fleet_e2e", Timeout: deadline},
						func(ctx context.Context, attempt int) error {
							attempts++
							return post(ctx, p.URL, attempt)
						})
					log.add(callRecord{start: start, end: time.Now(), attempts: attempts, err: err})
				}()
				select {
				case <-ctx.Done():
				case <-tick.C:
				}
			}
		}()
	}
	wg.Wait()
	cancel()

	calls, attempts := log.get(), p.times()
	// The calls that start while the breaker is surely open (3 s into the
	// outage) and before the provider is back: they should all complete,
	// after the outage.
	from := downAt.Add(3 * time.Second)
	var during, ok, lateOK int
	var longest time.Duration
	for _, c := range calls {
		if c.start.Before(from) || !c.start.Before(upAt) {
			continue
		}
		during++
		if c.err == nil {
			ok++
			if c.end.After(upAt) {
				lateOK++
			}
		}
		longest = max(longest, c.end.Sub(c.start))
	}
	upstream := countSince(attempts, from, upAt)
	secs := upAt.Sub(from).Seconds()
	t.Logf("%d calls; %d parked; %d started in the outage's last %.0f s: %d succeeded (%d after the outage), longest %v; "+
		"%d upstream attempts in those %.0f s (%.2f a second)",
		len(calls), parks.Load(), during, secs, ok, lateOK, longest.Round(time.Millisecond), upstream, secs, float64(upstream)/secs)
	if during == 0 || parks.Load() == 0 {
		t.Fatalf("no call parked during the outage")
	}
	if ok < during*95/100 {
		why := map[string]int{}
		for _, c := range calls {
			if c.err != nil && !c.start.Before(from) && c.start.Before(upAt) {
				why[c.err.Error()]++
			}
		}
		t.Errorf("%d of %d calls started during the outage succeeded; want ≥ 95 %% (parked until the provider was back); failures: %v", ok, during, why)
	}
	if limit := int(2*secs) + 2; upstream > limit {
		t.Errorf("%d upstream attempts in %.0f s of outage, want at most %d (about one probe a second)", upstream, secs, limit)
	}
}
