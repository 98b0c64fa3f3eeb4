package fleet

import (
	"fmt"
	"strings"
	"testing"
	"time"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

const (
	overloaded = policydv1.FailureType_FAILURE_TYPE_OVERLOADED
	rateLimit  = policydv1.FailureType_FAILURE_TYPE_RATE_LIMIT
	authBad    = policydv1.FailureType_FAILURE_TYPE_AUTH_INVALID
	quotaOut   = policydv1.FailureType_FAILURE_TYPE_QUOTA_EXHAUSTED
	badRequest = policydv1.FailureType_FAILURE_TYPE_INVALID_REQUEST
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

type recorder struct{ events []Event }

func (r *recorder) sink(es []Event) { r.events = append(r.events, es...) }
func (r *recorder) kinds() []EventKind {
	var ks []EventKind
	for _, e := range r.events {
		ks = append(ks, e.Kind)
	}
	return ks
}

func newTestFleet(t *testing.T, mutate func(*Config)) (*Fleet, *fakeClock, *recorder) {
	t.Helper()
	cfg := Defaults()
	if mutate != nil {
		mutate(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{t: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)}
	rec := &recorder{}
	return New(cfg, WithClock(clk.now), WithSink(rec.sink)), clk, rec
}

// ask is a retry the strategy would send after delay.
func ask(client string, t policydv1.FailureType, delay time.Duration) Ask {
	return Ask{
		Target:      Target{Tenant: "team", Provider: "openai", Model: "gpt-4o", KeyID: "prod"},
		ClientID:    client,
		FailureType: t,
		Attempt:     1,
		Retry:       true,
		Delay:       delay,
		Switches:    AllOn,
	}
}

func TestHoldOnlyMovesForward(t *testing.T) {
	f, clk, rec := newTestFleet(t, nil)
	a := ask("a", rateLimit, time.Second)
	a.RetryAfter = 30 * time.Second
	f.Decide(a)
	clk.advance(time.Second)
	b := ask("b", rateLimit, time.Second)
	b.RetryAfter = 5 * time.Second // shorter: must not pull the hold back
	got := f.Decide(b)
	if !got.Retry || got.Delay < 29*time.Second {
		t.Fatalf("a shorter hint shortened the hold: %+v", got)
	}
	if got.State == nil || got.State.HoldLeft != 29*time.Second || !got.State.Changed {
		t.Fatalf("state = %+v, want 29s hold left and changed", got.State)
	}
	if k := rec.kinds(); len(k) != 1 || k[0] != EventHoldSet {
		t.Fatalf("events = %v, want one hold_set", k)
	}
	// Another agent on the same key and model, with no hint of its own, waits too.
	c := ask("c", rateLimit, time.Second)
	if got := f.Decide(c); got.Delay < 29*time.Second {
		t.Fatalf("an agent without a hint did not wait for the hold: %v", got.Delay)
	}
	// Another key is not held.
	d := ask("d", rateLimit, time.Second)
	d.KeyID = "other"
	if got := f.Decide(d); got.Delay != time.Second {
		t.Fatalf("another key was held: %v", got.Delay)
	}
}

func TestHoldStaggersRelease(t *testing.T) {
	f, clk, _ := newTestFleet(t, func(c *Config) { c.Budget.Burst = 1000 })
	// 20 first attempts per second for 5 s hit a 10 s window.
	var release []time.Time
	start := clk.t
	for i := range 100 {
		a := ask("agent-"+string(rune('a'+i%26)), rateLimit, 500*time.Millisecond)
		a.RetryAfter = start.Add(10 * time.Second).Sub(clk.t)
		got := f.Decide(a)
		release = append(release, clk.t.Add(got.Delay))
		clk.advance(50 * time.Millisecond)
	}
	// Nobody leaves before the hold ends, and the releases are spread over
	// a window one and a half times the hold (15 s), not in one second.
	holdEnd := start.Add(10 * time.Second)
	first, last := release[0], release[0]
	for i, r := range release {
		if r.Before(holdEnd) {
			t.Fatalf("waiter %d leaves at %v, before the hold ends at %v", i, r.Sub(start), holdEnd.Sub(start))
		}
		if r.Before(first) {
			first = r
		}
		if r.After(last) {
			last = r
		}
	}
	if spread := last.Sub(first); spread < 5*time.Second {
		t.Fatalf("100 waiters released over %v; want them spread over several seconds", spread)
	}
	perSecond := map[int64]int{}
	for _, r := range release {
		perSecond[r.Unix()]++
	}
	for s, n := range perSecond {
		if n > 25 {
			t.Fatalf("%d waiters released in second %d; want about 10", n, s-start.Unix())
		}
	}
}

// A burst of waiters that all failed in the same instant is spread as
// evenly as one that arrived over time: the slots need no count in advance.
func TestHoldSpreadsABurst(t *testing.T) {
	// A 2 s hold and a release window of 1 s: 60 waiters, 6 in every 100 ms.
	f, _, _ := newTestFleet(t, func(c *Config) { c.Hold.Spread = 0.5 })
	perTenth := map[int64]int{}
	for i := range 60 {
		a := ask(fmt.Sprintf("agent-%d", i), rateLimit, 100*time.Millisecond)
		a.RetryAfter = 2 * time.Second
		got := f.Decide(a)
		perTenth[int64(got.Delay/(100*time.Millisecond))]++
	}
	for tenth := int64(20); tenth < 30; tenth++ {
		if n := perTenth[tenth]; n < 5 || n > 7 {
			t.Errorf("%d of 60 waiters released in [%v, %v); want 6 (±1) in each 100 ms of the 1 s after the hold: %v",
				n, time.Duration(tenth)*100*time.Millisecond, time.Duration(tenth+1)*100*time.Millisecond, perTenth)
		}
	}
}

func TestStopRenewsAndExpires(t *testing.T) {
	f, clk, rec := newTestFleet(t, nil)
	a := ask("a", authBad, 0)
	a.Retry, a.Recovery = false, "Check the API key."
	f.Decide(a)
	clk.advance(30 * time.Second)
	// A timeout on the same key is retried by its strategy; the fleet stops it.
	got := f.Decide(ask("b", policydv1.FailureType_FAILURE_TYPE_TIMEOUT, time.Second))
	if got.Retry || got.Reason != ReasonStop || !strings.Contains(got.Why, "Check the API key.") {
		t.Fatalf("the stopped key was retried: %+v", got)
	}
	// Renewed by a new failure at 30 s: still stopped at 80 s.
	f.Decide(a)
	clk.advance(50 * time.Second)
	if got := f.Decide(ask("b", policydv1.FailureType_FAILURE_TYPE_TIMEOUT, time.Second)); got.Retry {
		t.Fatalf("the stop was not renewed: %+v", got)
	}
	clk.advance(11 * time.Second)
	if got := f.Decide(ask("b", policydv1.FailureType_FAILURE_TYPE_TIMEOUT, time.Second)); !got.Retry {
		t.Fatalf("the stop did not expire: %+v", got)
	}
	if n := strings.Count(strings.Join(kindsStr(rec), ","), string(EventFleetStop)); n != 1 {
		t.Fatalf("fleet_stop events = %d, want 1 (a renewal is not a new stop): %v", n, rec.kinds())
	}
	// Without a key_id nothing says two agents share a credential: no stop.
	g, _, _ := newTestFleet(t, nil)
	k := ask("a", quotaOut, 0)
	k.KeyID, k.Retry = "", false
	g.Decide(k)
	b := ask("b", rateLimit, time.Second)
	b.KeyID = ""
	if got := g.Decide(b); !got.Retry {
		t.Fatalf("a keyless failure stopped other agents: %+v", got)
	}
}

func kindsStr(r *recorder) []string {
	var s []string
	for _, k := range r.kinds() {
		s = append(s, string(k))
	}
	return s
}

func TestBreakerNeedsThreeClients(t *testing.T) {
	f, _, rec := newTestFleet(t, func(c *Config) { c.Budget.Burst = 1000 })
	for i := range 40 {
		f.Decide(ask([]string{"a", "b"}[i%2], overloaded, time.Second))
	}
	if len(rec.events) != 0 {
		t.Fatalf("two clients opened the breaker: %v", rec.kinds())
	}
	got := f.Decide(ask("c", overloaded, time.Second))
	if k := rec.kinds(); len(k) != 1 || k[0] != EventBreakerOpen {
		t.Fatalf("a third client did not open it: %v", k)
	}
	if got.State == nil || got.State.Breaker != Open {
		t.Fatalf("state = %+v, want open", got.State)
	}
}

func TestBreakerOpensHalfOpensAndCloses(t *testing.T) {
	f, clk, rec := newTestFleet(t, func(c *Config) { c.Budget.Burst = 1000 })
	for i := range 20 {
		f.Decide(ask([]string{"a", "b", "c"}[i%3], overloaded, time.Second))
	}
	// Open: an agent with a fallback falls back; one without waits out the
	// open period when that fits, else stops.
	fb := ask("d", overloaded, time.Second)
	fb.CanFallBack = true
	if got := f.Decide(fb); got.Retry || got.Reason != ReasonCircuitOpen {
		t.Fatalf("open breaker with a fallback: %+v", got)
	}
	w := ask("e", overloaded, time.Second)
	if got := f.Decide(w); !got.Retry || got.Delay < 5*time.Second {
		t.Fatalf("open breaker, no fallback, fits: %+v", got)
	}
	short := ask("e", overloaded, time.Second)
	short.MaxWait = 2 * time.Second
	if got := f.Decide(short); got.Retry || got.Reason != ReasonCircuitOpen || !strings.Contains(got.Why, "open for") {
		t.Fatalf("open breaker, wait does not fit: %+v", got)
	}
	// Half-open after 5 s: one probe per second for the whole fleet.
	clk.advance(5 * time.Second)
	probes := 0
	for _, c := range []string{"p", "q", "r", "s"} {
		a := ask(c, rateLimit, 100*time.Millisecond) // not counted: keeps it half-open
		a.MaxWait = 1500 * time.Millisecond
		if got := f.Decide(a); got.Retry {
			probes++
		}
	}
	if probes != 2 { // the slot now and the next one within a second
		t.Fatalf("%d retries let through while half-open; want 2 (1 per second)", probes)
	}
	// A counted failure while half-open re-opens for twice as long.
	f.Decide(ask("p", overloaded, time.Second))
	if v, _ := f.Bucket("team", "availability:openai/gpt-4o"); v.State.Breaker != Open || v.State.OpenLeft != 10*time.Second {
		t.Fatalf("after a failed probe: %+v", v.State)
	}
	// Half-open again after 10 s, closed 3 s later with no counted failure.
	clk.advance(13 * time.Second)
	got := f.Decide(ask("z", rateLimit, time.Second))
	if got.State != nil && got.State.Breaker != Closed {
		t.Fatalf("not closed after a quiet half-open: %+v", got.State)
	}
	want := []EventKind{EventBreakerOpen, EventBreakerHalfOpen, EventBreakerOpen, EventBreakerHalfOpen, EventBreakerClose, EventSlowStart}
	if k := rec.kinds(); strings.Join(kindsToStr(k), ",") != strings.Join(kindsToStr(want), ",") {
		t.Fatalf("events = %v, want %v", k, want)
	}
}

func kindsToStr(ks []EventKind) []string {
	var s []string
	for _, k := range ks {
		s = append(s, string(k))
	}
	return s
}

func TestBudgetDrawsRefillsAndPaces(t *testing.T) {
	f, clk, rec := newTestFleet(t, func(c *Config) { c.Breaker.MinVolume = 1000 })
	for i := range 10 {
		if got := f.Decide(ask("a", overloaded, time.Second)); !got.Retry || got.Delay != time.Second {
			t.Fatalf("retry %d within the burst: %+v", i, got)
		}
	}
	// Empty: with a fallback, fall back; else pace to the next token when
	// that fits, else stop.
	fb := ask("a", overloaded, 100*time.Millisecond)
	fb.CanFallBack = true
	if got := f.Decide(fb); got.Retry || got.Reason != ReasonBudget {
		t.Fatalf("empty budget with a fallback: %+v", got)
	}
	if got := f.Decide(ask("a", overloaded, 100*time.Millisecond)); !got.Retry || got.Delay != time.Second {
		t.Fatalf("empty budget, paced: %+v", got)
	}
	if got := f.Decide(ask("a", overloaded, 100*time.Millisecond)); !got.Retry || got.Delay != 2*time.Second {
		t.Fatalf("empty budget, second paced retry: %+v", got)
	}
	tight := ask("a", overloaded, 100*time.Millisecond)
	tight.MaxWait = 999 * time.Millisecond
	if got := f.Decide(tight); got.Retry || got.Reason != ReasonBudget {
		t.Fatalf("empty budget, wait does not fit: %+v", got)
	}
	// Refilled at 1/s: after 20 s, the burst is back.
	clk.advance(20 * time.Second)
	if got := f.Decide(ask("a", overloaded, time.Second)); !got.Retry || got.Delay != time.Second {
		t.Fatalf("after the refill: %+v", got)
	}
	if n := strings.Count(strings.Join(kindsStr(rec), ","), string(EventBudgetExhausted)); n != 1 {
		t.Fatalf("budget_exhausted events = %d, want 1", n)
	}
}

func TestSwitchesAndUntracked(t *testing.T) {
	f, _, rec := newTestFleet(t, nil)
	off := ask("a", rateLimit, time.Second)
	off.RetryAfter, off.Switches = time.Minute, Switches{}
	if got := f.Decide(off); got.Delay != time.Second {
		t.Fatalf("hold off, yet held: %+v", got)
	}
	if len(rec.events) != 0 {
		t.Fatalf("hold off, yet events: %v", rec.kinds())
	}
	// A malformed request makes no bucket and is left as it is.
	br := ask("a", badRequest, 0)
	br.Retry = false
	if got := f.Decide(br); got.State != nil {
		t.Fatalf("an invalid request got fleet state: %+v", got.State)
	}
	// No provider: nothing to share.
	np := ask("a", rateLimit, time.Second)
	np.Provider, np.RetryAfter = "", time.Minute
	if got := f.Decide(np); got.Delay != time.Second || got.State != nil {
		t.Fatalf("no provider: %+v", got)
	}
}

func TestAvailableSkipsOpenAndStopped(t *testing.T) {
	f, _, _ := newTestFleet(t, func(c *Config) { c.Budget.Burst = 1000 })
	for i := range 20 {
		f.Decide(ask([]string{"a", "b", "c"}[i%3], overloaded, time.Second))
	}
	if ok, why := f.Available(Target{Tenant: "team", Provider: "openai", Model: "gpt-4o"}); ok || !strings.Contains(why, "breaker open") {
		t.Fatalf("open target available: %v %q", ok, why)
	}
	if ok, _ := f.Available(Target{Tenant: "team", Provider: "openai", Model: "gpt-4o-mini"}); !ok {
		t.Fatal("another model unavailable")
	}
	if ok, _ := f.Available(Target{Tenant: "other", Provider: "openai", Model: "gpt-4o"}); !ok {
		t.Fatal("another tenant's breaker applied")
	}
}

func TestScopesNarrowAndWiden(t *testing.T) {
	// A rate-limit scope without the model: one hold for every model on the key.
	f, _, _ := newTestFleet(t, func(c *Config) {
		c.Scopes[ScopeRateLimit] = Fields{Provider: true, Key: true}
	})
	a := ask("a", rateLimit, time.Second)
	a.RetryAfter = time.Minute
	f.Decide(a)
	b := ask("b", rateLimit, time.Second)
	b.Model = "gpt-4o-mini"
	if got := f.Decide(b); got.Delay < 59*time.Second {
		t.Fatalf("widened scope: another model was not held: %v", got.Delay)
	}
	if got, _ := f.Buckets("team", "", "", 0, ""); len(got) != 1 || got[0].State.Bucket != "rate_limit:openai@prod" {
		t.Fatalf("buckets = %+v", got)
	}
}

func TestConfigValidateNamesTheField(t *testing.T) {
	c := Defaults()
	c.Breaker.MinClients = 0
	c.Budget.Floor = -1
	c.Breaker.TripWindow = time.Minute // past the 10 s window
	c.Breaker.TripRate = 1.5           // above 1
	err := c.Validate()
	for _, field := range []string{"breaker.min_clients", "retry_budget.floor", "breaker.trip_window", "breaker.trip_rate"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Fatalf("Validate = %v, want %s named", err, field)
		}
	}
}
