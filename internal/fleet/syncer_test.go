package fleet_test

// Replicas sharing one fleet through an in-memory exchange (fleettest), which
// meets the same contract as the PostgreSQL one (internal/fleet/pgexchange).

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/fleet/fleettest"
)

const (
	serverError = policydv1.FailureType_FAILURE_TYPE_SERVER_ERROR
	rateLimited = policydv1.FailureType_FAILURE_TYPE_RATE_LIMIT
	streamCut   = policydv1.FailureType_FAILURE_TYPE_STREAM_INTERRUPTED
)

// clock is a settable clock the replicas share.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// events records a replica's journaled transitions.
type events struct {
	mu sync.Mutex
	es []fleet.Event
}

func (e *events) sink(es []fleet.Event) {
	e.mu.Lock()
	e.es = append(e.es, es...)
	e.mu.Unlock()
}

func (e *events) count(kind fleet.EventKind) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, x := range e.es {
		if x.Kind == kind {
			n++
		}
	}
	return n
}

type replica struct {
	f  *fleet.Fleet
	s  *fleet.Syncer
	ex *fleettest.MemoryExchange
	ev *events
}

// replicas starts n replicas of one fleet on space.
func replicas(t *testing.T, space *fleettest.MemorySpace, n int, clk *clock) []*replica {
	t.Helper()
	var rs []*replica
	for i := range n {
		ex := space.Open()
		t.Cleanup(ex.Close)
		ev := &events{}
		f := fleet.New(fleet.Defaults(), fleet.WithClock(clk.now), fleet.WithSink(ev.sink),
			fleet.WithReplica(string(rune('a'+i))))
		rs = append(rs, &replica{f: f, s: fleet.NewSyncer(f, ex), ex: ex, ev: ev})
	}
	return rs
}

// stepAll runs a round on every replica, twice: what one pushed, the
// others read in the second.
func stepAll(t *testing.T, rs []*replica) {
	t.Helper()
	for round := range 2 {
		for _, r := range rs {
			if err := r.s.Step(context.Background(), round > 0); err != nil {
				t.Fatalf("Step %s: %v", r.f.Replica(), err)
			}
		}
	}
}

var target = fleet.Target{Tenant: "team", Provider: "openai", Model: "gpt-4o", KeyID: "prod"}

func failure(client string, t policydv1.FailureType) fleet.Ask {
	return fleet.Ask{Target: target, ClientID: client, FailureType: t, Attempt: 1, Retry: true,
		Delay: time.Second, Switches: fleet.AllOn}
}

func breakerOf(f *fleet.Fleet) fleet.BreakerState { return f.Assign(target, "probe").Breaker }

func TestSharedBreakerMakesEachTransitionOnce(t *testing.T) {
	clk := &clock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	rs := replicas(t, fleettest.NewMemorySpace(), 3, clk)

	// Every replica gets failures from its own clients, concurrently, each
	// under the threshold alone (8 of MinVolume 20); a second later the
	// replicas publish their counts and read the others', concurrently:
	// each finds the fleet over the threshold and proposes the opening.
	var wg sync.WaitGroup
	for i, r := range rs {
		wg.Go(func() {
			for j := range 8 {
				r.f.Decide(failure(string(rune('a'+i))+string(rune('0'+j%4)), serverError))
			}
		})
	}
	wg.Wait()
	clk.advance(time.Second)
	for round := range 2 {
		for _, r := range rs {
			wg.Go(func() {
				if err := r.s.Step(context.Background(), round > 0); err != nil {
					t.Errorf("Step: %v", err)
				}
			})
		}
		wg.Wait()
	}
	stepAll(t, rs)
	opens := 0
	for _, r := range rs {
		opens += r.ev.count(fleet.EventBreakerOpen)
		if got := breakerOf(r.f); got != fleet.Open {
			t.Errorf("replica %s: breaker %v, want open", r.f.Replica(), got)
		}
	}
	if opens != 1 {
		t.Fatalf("breaker_open journaled %d times across the replicas, want exactly 1", opens)
	}

	// The open period ends on every replica at the same instant: each
	// proposes half-open, one wins.
	clk.advance(fleet.Defaults().Breaker.OpenFor + time.Millisecond)
	var wg2 sync.WaitGroup
	for _, r := range rs {
		wg2.Go(func() {
			r.f.Tick()
			if err := r.s.Step(context.Background(), true); err != nil {
				t.Errorf("Step: %v", err)
			}
		})
	}
	wg2.Wait()
	stepAll(t, rs)
	halfOpens, won, lost := 0, int64(0), int64(0)
	for _, r := range rs {
		halfOpens += r.ev.count(fleet.EventBreakerHalfOpen)
		st := r.s.Stats()
		won, lost = won+st.Won, lost+st.Lost
		if got := breakerOf(r.f); got != fleet.HalfOpen {
			t.Errorf("replica %s: breaker %v, want half_open", r.f.Replica(), got)
		}
	}
	if halfOpens != 1 {
		t.Fatalf("breaker_half_open journaled %d times, want exactly 1", halfOpens)
	}
	if won != 2 {
		t.Fatalf("transitions won = %d (lost %d), want 2: one open, one half-open", won, lost)
	}
}

func TestSharedHoldReachesTheOtherReplicas(t *testing.T) {
	clk := &clock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	rs := replicas(t, fleettest.NewMemorySpace(), 2, clk)
	a := failure("agent-1", rateLimited)
	a.RetryAfter = 30 * time.Second
	rs[0].f.Decide(a)
	if h := rs[1].f.Assign(target, "agent-2").Hold; h != 0 {
		t.Fatalf("replica b holds %v before any sync", h)
	}
	stepAll(t, rs)
	if h := rs[1].f.Assign(target, "agent-2").Hold; h < 29*time.Second {
		t.Fatalf("replica b's hold = %v after a sync, want the 30 s hold set on replica a", h)
	}
	// A retry decided on b waits out the hold set on a.
	got := rs[1].f.Decide(failure("agent-3", rateLimited))
	if !got.Retry || got.Delay < 29*time.Second {
		t.Fatalf("b's decision = %+v, want a retry after the shared hold", got)
	}
	if n := rs[0].ev.count(fleet.EventHoldSet) + rs[1].ev.count(fleet.EventHoldSet); n != 1 {
		t.Fatalf("hold_set journaled %d times, want once (on a)", n)
	}
}

func TestSharedHoldPropagatesWithinASecond(t *testing.T) {
	// Real time and the daemon's loops: the exchange's Wake wakes the reader.
	space := fleettest.NewMemorySpace()
	var rs []*replica
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for _, id := range []string{"a", "b"} {
		ex := space.Open()
		t.Cleanup(ex.Close)
		f := fleet.New(fleet.Defaults(), fleet.WithReplica(id))
		r := &replica{f: f, s: fleet.NewSyncer(f, ex), ex: ex}
		rs = append(rs, r)
		wg.Go(func() { f.Run(ctx) })
		wg.Go(func() { r.s.Run(ctx) })
	}
	var lags []time.Duration
	for i := range 20 {
		tg := target
		tg.KeyID = string(rune('A' + i))
		a := fleet.Ask{Target: tg, ClientID: "agent", FailureType: rateLimited, Attempt: 1, Retry: true,
			Delay: time.Second, RetryAfter: 30 * time.Second, Switches: fleet.AllOn}
		start := time.Now()
		rs[0].f.Decide(a)
		deadline := start.Add(5 * time.Second)
		for rs[1].f.Assign(tg, "other").Hold == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("hold %d not seen on b after 5 s", i)
			}
			time.Sleep(time.Millisecond)
		}
		lags = append(lags, time.Since(start))
	}
	worst := time.Duration(0)
	for _, l := range lags {
		worst = max(worst, l)
	}
	t.Logf("hold propagation over 20 holds: worst %v", worst)
	if worst > time.Second {
		t.Fatalf("a hold took %v to reach the other replica, want within 1 s", worst)
	}
}

func TestSharedProbeSlotGoesToOneReplica(t *testing.T) {
	clk := &clock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	rs := replicas(t, fleettest.NewMemorySpace(), 3, clk)
	for i := range 24 {
		rs[i%3].f.Decide(failure(string(rune('a'+i%6)), serverError))
	}
	stepAll(t, rs)
	clk.advance(fleet.Defaults().Breaker.OpenFor)
	for _, r := range rs {
		r.f.Tick()
	}
	stepAll(t, rs)
	for _, r := range rs {
		if got := breakerOf(r.f); got != fleet.HalfOpen {
			t.Fatalf("replica %s: breaker %v, want half_open", r.f.Replica(), got)
		}
	}
	// Each replica is asked for a retry (of a cut stream: a counted failure
	// would re-open the breaker): none holds a slot yet, so each wants one;
	// the syncers claim concurrently.
	for _, r := range rs {
		if got := r.f.Decide(failure("x", streamCut)); got.Retry && got.Delay < time.Second {
			t.Fatalf("replica %s let a retry through at once without a probe slot: %+v", r.f.Replica(), got)
		}
	}
	var wg sync.WaitGroup
	for _, r := range rs {
		wg.Go(func() {
			if err := r.s.Step(context.Background(), false); err != nil {
				t.Errorf("Step: %v", err)
			}
		})
	}
	wg.Wait()
	probes := 0
	for _, r := range rs {
		before := r.f.Effects()["probe"]
		r.f.Decide(failure("y", streamCut))
		probes += int(r.f.Effects()["probe"] - before)
	}
	if probes != 1 {
		t.Fatalf("%d replicas sent a probe in one probe interval, want exactly 1", probes)
	}
}

func TestSharedCountsOpenTheBreaker(t *testing.T) {
	// Failures spread over three replicas, each below the threshold alone.
	clk := &clock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	rs := replicas(t, fleettest.NewMemorySpace(), 3, clk)
	for i := range 18 { // 6 each: under MinVolume (20) on every replica
		rs[i%3].f.Decide(failure(string(rune('a'+i%6)), serverError))
	}
	stepAll(t, rs)
	for _, r := range rs {
		if breakerOf(r.f) != fleet.Closed {
			t.Fatal("a breaker opened below the fleet's threshold")
		}
	}
	clk.advance(time.Second)
	stepAll(t, rs) // the counts are due again
	for i := range 3 {
		rs[i].f.Decide(failure("late", serverError)) // 21 in the fleet's window
	}
	clk.advance(time.Second) // the counts are due
	stepAll(t, rs)
	for _, r := range rs {
		if got := breakerOf(r.f); got != fleet.Open {
			t.Fatalf("replica %s: breaker %v with 21 failures from 7 clients across the fleet, want open", r.f.Replica(), got)
		}
	}
}

// The breaker's trip on the last seconds counts every replica's: failures
// spread over three replicas, under min_volume on each, trip it while the
// window's earlier successes still outweigh them.
func TestSharedCountsTripTheBreaker(t *testing.T) {
	clk := &clock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	rs := replicas(t, fleettest.NewMemorySpace(), 3, clk)
	rs[0].f.Report(fleet.Usage{Target: target, ClientID: "stream", Admitted: 100, Succeeded: 100})
	clk.advance(7 * time.Second) // the successes stay in the 10 s window
	stepAll(t, rs)
	for i := range 21 { // 7 each: 21 of 121 outcomes in the window, 21 of 21 in the last 2 s
		rs[i%3].f.Decide(failure(string(rune('a'+i%6)), serverError))
	}
	for _, r := range rs {
		if breakerOf(r.f) != fleet.Closed {
			t.Fatal("a breaker tripped on one replica's 7 failures")
		}
	}
	clk.advance(time.Second) // the counts are due
	stepAll(t, rs)
	rs[0].f.Decide(failure("late", serverError)) // a decision looks again
	stepAll(t, rs)
	for _, r := range rs {
		if got := breakerOf(r.f); got != fleet.Open {
			t.Fatalf("replica %s: breaker %v with 22 failures in the fleet's last 2 s, want open", r.f.Replica(), got)
		}
	}
}

func TestSharedBudgetHoldsForTheFleet(t *testing.T) {
	// A retry budget of 10 for the fleet: two replicas asked in turn allow
	// about 10 retries between them, not 10 each.
	clk := &clock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	rs := replicas(t, fleettest.NewMemorySpace(), 2, clk)
	cfg := fleet.Defaults()
	cfg.Breaker.MinVolume = 1000 // the budget alone
	for _, r := range rs {
		r.f.SetConfig(cfg)
	}
	// Warm up: both replicas ask once, and share their counts.
	for _, r := range rs {
		r.f.Decide(failure("w", serverError))
	}
	clk.advance(time.Second)
	stepAll(t, rs)
	allowed := 0
	for i := range 60 {
		a := failure(string(rune('a'+i%8)), serverError)
		a.CanFallBack = true // an empty budget stops instead of pacing
		if rs[i%2].f.Decide(a).Retry {
			allowed++
		}
	}
	// The fleet's burst of 10: 5 on each replica, by their shares.
	if allowed > 10 {
		t.Fatalf("%d retries allowed across two replicas, want the fleet's burst of 10, not 10 each", allowed)
	}
	if allowed < 5 {
		t.Fatalf("%d retries allowed, want about the fleet's burst", allowed)
	}
}

func TestSharedFleetSurvivesTheDatabase(t *testing.T) {
	space := fleettest.NewMemorySpace()
	clk := &clock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	rs := replicas(t, space, 2, clk)
	stepAll(t, rs)

	space.SetDown(true)
	a := failure("agent-1", rateLimited)
	a.RetryAfter = 30 * time.Second
	if got := rs[0].f.Decide(a); !got.Retry || got.Delay < 29*time.Second {
		t.Fatalf("decision with the database down = %+v, want the local hold", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err := rs[0].s.Step(ctx, true)
	cancel()
	if err == nil {
		t.Fatal("Step with the database stopped: no error")
	}
	if st := rs[0].s.Stats(); st.Up || st.Errors == 0 {
		t.Fatalf("stats with the database down = %+v, want down with an error", st)
	}

	space.SetDown(false)
	deadline := time.Now().Add(30 * time.Second)
	for {
		err0 := rs[0].s.Step(context.Background(), true)
		err1 := rs[1].s.Step(context.Background(), true)
		if err0 == nil && err1 == nil && rs[1].f.Assign(target, "agent-2").Hold > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not back in step 30 s after the database restarted: %v, %v", err0, err1)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !rs[0].s.Stats().Up {
		t.Fatal("stats say down after a good round")
	}
}

// A replica that hears of a close after the winner made it slow-starts
// from the close, as the winner does, not from when it heard of it: the
// gates of both admit the same share of first attempts.
func TestSharedSlowStartRunsFromTheClose(t *testing.T) {
	clk := &clock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	rs := replicas(t, fleettest.NewMemorySpace(), 2, clk)
	a, b := rs[0], rs[1]
	for j := range 24 {
		a.f.Decide(failure("c"+string(rune('0'+j%4)), serverError))
	}
	stepAll(t, rs)
	if got := breakerOf(b.f); got != fleet.Open {
		t.Fatalf("replica b: breaker %v, want open", got)
	}
	clk.advance(fleet.Defaults().Breaker.OpenFor + time.Millisecond)
	for _, r := range rs {
		r.f.Tick()
	}
	stepAll(t, rs)
	if got := breakerOf(b.f); got != fleet.HalfOpen {
		t.Fatalf("replica b: breaker %v, want half_open", got)
	}

	// Two probes succeed on a's streams: a closes; b hears of it 600 ms
	// later (a lost notification, a slow round).
	a.f.Report(fleet.Usage{Target: target, ClientID: "c0", Admitted: 2, Succeeded: 2})
	if got := breakerOf(a.f); got != fleet.Closed {
		t.Fatalf("replica a: breaker %v after 2 probe successes, want closed", got)
	}
	clk.advance(600 * time.Millisecond)
	stepAll(t, rs)
	if got := breakerOf(b.f); got != fleet.Closed {
		t.Fatalf("replica b: breaker %v, want closed", got)
	}
	ss := fleet.Defaults().SlowStart
	want := ss.From + (1-ss.From)*0.6/ss.Window.Seconds()
	for _, r := range rs {
		if got := r.f.Assign(target, "x").AdmitFraction; math.Abs(got-want) > 0.005 {
			t.Errorf("replica %s: admit fraction %.3f 600 ms after the close, want %.3f (the slow start from the close)", r.f.Replica(), got, want)
		}
	}
}
