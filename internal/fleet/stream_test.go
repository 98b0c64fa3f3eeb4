package fleet

import (
	"strings"
	"testing"
	"time"
)

var streamTarget = Target{Tenant: "team", Provider: "openai", Model: "gpt-4o", KeyID: "prod"}

// Streams' reports make the availability bucket exist from a target's first
// call; a rate limit's retries still do not draw on its budget (the hold
// paces them), while an overload's do.
func TestRateLimitRetriesSpendNoBudget(t *testing.T) {
	f, _, _ := newTestFleet(t, func(c *Config) { c.Budget.Burst, c.Budget.Floor, c.Budget.Ratio = 2, 0.001, 0 })
	f.Report(Usage{Target: streamTarget, ClientID: "a", Admitted: 1})
	for i := range 5 {
		if a := f.Decide(ask("a", rateLimit, time.Second)); !a.Retry {
			t.Fatalf("429 retry %d stopped: %+v", i, a)
		}
	}
	var stopped bool
	for range 3 {
		if a := f.Decide(ask("a", overloaded, time.Second)); !a.Retry {
			stopped = a.Reason == ReasonBudget
		}
	}
	if !stopped {
		t.Fatal("overload retries past the budget were not stopped by it")
	}
}

// The breaker opens on a failure rate: successes the streams report keep
// it closed through failures that would open it without them.
func TestBreakerOpensOnFailureRate(t *testing.T) {
	f, _, _ := newTestFleet(t, func(c *Config) { c.Breaker.MinVolume, c.Breaker.MinClients = 10, 1 })
	f.Report(Usage{Target: streamTarget, ClientID: "a", Admitted: 30, Succeeded: 30})
	for range 20 { // 20 of 50 outcomes: 40 %
		f.Decide(ask("b", overloaded, time.Second))
	}
	if a := f.Assign(streamTarget, "a"); a.Breaker != Closed {
		t.Fatalf("at 40 %% failures: %+v", a)
	}
	for range 11 { // 31 of 61: 51 %
		f.Decide(ask("b", overloaded, time.Second))
	}
	if a := f.Assign(streamTarget, "a"); a.Breaker != Open {
		t.Fatalf("at 51 %% failures: %+v, want open", a)
	}
}

// Half-open, the assignment lets about one first attempt per probe
// interval through, whatever the fleet's size; reported successes close
// the breaker, and slow start follows, rising to all.
func TestHalfOpenProbesAndSlowStart(t *testing.T) {
	f, clk, rec := newTestFleet(t, func(c *Config) { c.Breaker.MinVolume, c.Breaker.MinClients = 5, 1 })
	f.Report(Usage{Target: streamTarget, ClientID: "a", Admitted: 200}) // 20 first attempts a second over 10 s
	for range 5 {
		f.Decide(ask("b", overloaded, time.Second))
	}
	if a := f.Assign(streamTarget, "a"); a.Breaker != Open || a.Admits() {
		t.Fatalf("after 5 failures: %+v", a)
	}
	clk.advance(f.Config().Breaker.OpenFor)
	a := f.Assign(streamTarget, "a")
	if a.Breaker != HalfOpen || a.AdmitFraction < 0.04 || a.AdmitFraction > 0.06 {
		t.Fatalf("half-open: %+v, want about 1/20 of first attempts as probes", a)
	}
	f.Report(Usage{Target: streamTarget, ClientID: "a", Admitted: 1, Succeeded: 2})
	a = f.Assign(streamTarget, "a")
	if a.Breaker != Closed || a.AdmitFraction < 0.099 || a.AdmitFraction > 0.101 {
		t.Fatalf("after 2 probe successes: %+v, want closed at 10 %%", a)
	}
	clk.advance(f.Config().SlowStart.Window)
	if a := f.Assign(streamTarget, "a"); a.AdmitFraction != 1 || !a.Admits() {
		t.Fatalf("after the slow start: %+v", a)
	}
	if k := rec.kinds(); k[len(k)-1] != EventSlowStart {
		t.Fatalf("events %v, want a slow_start last", k)
	}
}

// A hold's stagger slot is the client's own and stays the same when the
// assignment is refreshed.
func TestAssignHoldSlotsPerClient(t *testing.T) {
	f, clk, _ := newTestFleet(t, nil)
	a := ask("x", rateLimit, 10*time.Second)
	a.RetryAfter = 10 * time.Second
	f.Decide(a)
	h1, h2 := f.Assign(streamTarget, "c1").Hold, f.Assign(streamTarget, "c2").Hold
	if h1 == h2 || h1 < 10*time.Second || h2 < 10*time.Second {
		t.Fatalf("holds %v and %v: want two slots after the 10-s hold", h1, h2)
	}
	clk.advance(time.Second)
	if again := f.Assign(streamTarget, "c2").Hold; again != h2-time.Second {
		t.Fatalf("refreshed hold %v, want %v (the same slot)", again, h2-time.Second)
	}
}

// Pacing: with a request limit from the headers, the gates admit the share
// of first attempts that keeps the fleet at 93 % of it.
func TestPacingFromRateLimitHeaders(t *testing.T) {
	f, _, _ := newTestFleet(t, nil)
	rpm := ReadLimits("openai", map[string]string{"x-ratelimit-limit-requests": "600"}, time.Time{}).RequestsPerMinute
	f.Report(Usage{Target: streamTarget, ClientID: "a", Admitted: 100, RequestsPerMinute: rpm}) // 20/s against 10/s
	f.Report(Usage{Target: streamTarget, ClientID: "b", Admitted: 100, RequestsPerMinute: rpm}) // corroborated
	a := f.Assign(streamTarget, "a")
	if want := 0.93 * 10 / 20; a.AdmitFraction < want-0.01 || a.AdmitFraction > want+0.01 || a.Cause != CausePacing {
		t.Fatalf("paced: %+v, want about %.3f", a, want)
	}
}

// A provider that goes down trips the breaker on the last seconds' outcomes
// when the window's earlier successes still outweigh its failures, also
// while the calls admitted before it still succeed (at least TripRate, 80
// %, of the last 2 s failed); with trip_window off it waits for the window.
func TestBreakerTripsOnTheLastSeconds(t *testing.T) {
	for _, tc := range []struct {
		name     string
		trip     time.Duration
		recentOK int // successes reported in the last 2 s, among 25 failures
		wantOpen bool
		why      string
	}{
		{"trip_window 2s", 2 * time.Second, 0, true, "20 failures in 2s from 3 clients"},
		{"5 successes in the last 2 s: open at 80 %", 2 * time.Second, 5, true, "20 of 25 attempts failed in 2s"},
		{"8 successes in the last 2 s: at most 76 %", 2 * time.Second, 8, false, ""},
		{"trip_window off", 0, 0, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, clk, rec := newTestFleet(t, func(c *Config) { c.Breaker.TripWindow = tc.trip })
			f.Report(Usage{Target: streamTarget, ClientID: "a", Admitted: 100, Succeeded: 100})
			clk.advance(8 * time.Second) // the successes are still in the 10 s window
			if tc.recentOK > 0 {
				f.Report(Usage{Target: streamTarget, ClientID: "a", Succeeded: int64(tc.recentOK)})
			}
			for i := range 25 { // 25 of 125+ outcomes in the window
				f.Decide(ask(string(rune('a'+i%3)), overloaded, time.Second))
			}
			a := f.Assign(streamTarget, "a")
			if (a.Breaker == Open) != tc.wantOpen {
				t.Fatalf("breaker %v after 25 failures and %d successes in the last 2 s, 100 successes 8 s before; want open %v", a.Breaker, tc.recentOK, tc.wantOpen)
			}
			if tc.wantOpen {
				if e := rec.events[len(rec.events)-1]; e.Kind != EventBreakerOpen || !strings.Contains(e.Reason, tc.why) {
					t.Fatalf("last event %+v, want breaker_open saying %q", e, tc.why)
				}
			}
		})
	}
}
