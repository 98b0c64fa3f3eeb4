package policyd_test

import (
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
	"sync"
	"sync/atomic"
	"testing"
	"time"

	policyd "github.com/policyd/policyd/clients/go"
)

// The fleet end to end: a real policyd process, agents as goroutines each
// with its own Client (its own client id), and a fake provider on
// 127.0.0.1. Short timings, from the policy file below, bound each run to a
// few seconds; docs/fleet.md has the simulation at full scale.
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

// fleetDaemon starts a policyd with fleetPolicy and --fleet=mode.
func fleetDaemon(t *testing.T, mode string) string {
	t.Helper()
	policydBin(t)
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(fleetPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := startDaemon("127.0.0.1:0", "", "--policy", file, "--fleet", mode)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.stop)
	return d.addr
}

// provider is a fake LLM API: answer decides each request's response.
type provider struct {
	*httptest.Server
	mu       sync.Mutex
	attempts []time.Time
	answer   func(now time.Time) (status int, headers map[string]string, body string)
}

func newProvider(t *testing.T, answer func(now time.Time) (int, map[string]string, string)) *provider {
	p := &provider{answer: answer}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		p.mu.Lock()
		p.attempts = append(p.attempts, now)
		p.mu.Unlock()
		status, headers, body := p.answer(now)
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
}

func (r *fleetRun) stopped(reason policyd.StopReason) int64 {
	v, ok := r.stops.Load(reason)
	if !ok {
		return 0
	}
	return v.(*atomic.Int64).Load()
}

// runAgents runs n agents against url until the context ends: each calls,
// thinks for think, and calls again.
func runAgents(ctx context.Context, t *testing.T, addr, url, keyID string, n int, think time.Duration, run *fleetRun) {
	var wg sync.WaitGroup
	for i := range n {
		c := newClient(t, addr, policyd.WithClientID(fmt.Sprintf("agent-%d", i)),
			policyd.WithOnDecision(func(int, error, policyd.Decision) { run.nextDelays.Add(1) }))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				run.logical.Add(1)
				err := c.Do(ctx, policyd.Call{Provider: "openai", Model: "gpt-4o", KeyID: keyID, Operation: "chat",
					Method: "POST", Profile: "fleet_e2e", Timeout: 5 * time.Second},
					func(ctx context.Context, attempt int) error {
						req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
						resp, err := http.DefaultClient.Do(req)
						if err != nil {
							return err
						}
						defer resp.Body.Close()
						if err := policyd.CheckResponse(resp); err != nil {
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
		p := newProvider(t, func(time.Time) (int, map[string]string, string) { return 503, nil, fleetOverloadedBody })
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
		p := newProvider(t, func(now time.Time) (int, map[string]string, string) {
			if now.Before(end) {
				secs := int(math.Ceil(end.Sub(now).Seconds()))
				return 429, map[string]string{"retry-after": strconv.Itoa(secs)},
					`{"error":{"message":"Rate limit reached for gpt-4o. Please try again later.","type":"requests","code":"rate_limit_exceeded"}}`
			}
			return 200, nil, `{"ok":true}`
		})
		run := &fleetRun{}
		ctx, cancel := context.WithTimeout(context.Background(), 7*time.Second)
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
		t.Logf("fleet=%s: %d returned after the window, at most %d in 200 ms; %d of %d calls succeeded",
			mode, len(after), peak[mode], run.successes.Load(), run.logical.Load())
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
	unauthorized := newProvider(t, func(time.Time) (int, map[string]string, string) {
		return 401, nil, `{"error":{"message":"Incorrect API key provided: sk-abc***xyz.","type":"invalid_request_error","code":"invalid_api_key"}}`
	})
	timeout := newProvider(t, func(time.Time) (int, map[string]string, string) {
		return 408, nil, `{"error":{"message":"Request timed out.","type":"timeout"}}`
	})
	call := func(url, key string) error {
		c := newClient(t, addr)
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
	if err := call(timeout.URL, "revoked"); !errors.As(err, &pe) || pe.Decision.StopReason != policyd.StopFleetStop ||
		pe.Decision.Fleet == nil || !pe.Decision.Fleet.Stopped || pe.Attempts != 1 {
		t.Fatalf("a timeout on the revoked key: %v (decision %+v), want a fleet stop after 1 attempt", err, pe)
	}
	if err := call(timeout.URL, "healthy"); !errors.As(err, &pe) || pe.Decision.StopReason != policyd.StopAttemptsExhausted || pe.Attempts != 3 {
		t.Fatalf("a timeout on another key: %v, want its 3 attempts", err)
	}
}

// TestFleetNoRPCOnSuccess: calls that succeed never ask policyd.
func TestFleetNoRPCOnSuccess(t *testing.T) {
	addr := fleetDaemon(t, "on")
	p := newProvider(t, func(time.Time) (int, map[string]string, string) { return 200, nil, `{"ok":true}` })
	run := &fleetRun{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	runAgents(ctx, t, addr, p.URL, "k1", 50, 20*time.Millisecond, run)
	cancel()
	if run.successes.Load() < 50 || run.nextDelays.Load() != 0 {
		t.Fatalf("%d successes, %d decisions asked; want ≥ 50 and 0", run.successes.Load(), run.nextDelays.Load())
	}
}
