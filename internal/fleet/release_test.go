package fleet

import (
	"fmt"
	"testing"
	"time"
)

// openWithParked opens the breaker of streamTarget after 20 first attempts
// a second were admitted, with clients "p1".."p4" holding a parked call
// each and "idle" holding none.
func openWithParked(t *testing.T) (*Fleet, *fakeClock) {
	t.Helper()
	f, clk, _ := newTestFleet(t, func(c *Config) { c.Breaker.MinVolume, c.Breaker.MinClients = 5, 1 })
	f.Report(Usage{Target: streamTarget, ClientID: "idle", Admitted: 200}) // 20 a second over the window
	for range 5 {
		f.Decide(ask("b", overloaded, time.Second))
	}
	for _, c := range []string{"p1", "p2", "p3", "p4"} {
		f.Report(Usage{Target: streamTarget, ClientID: c, Parked: 1, ParkedNew: 1})
	}
	if a := f.Assign(streamTarget, "p1"); a.Breaker != Open || a.ParkHint <= 0 {
		t.Fatalf("not open, or no park hint: %+v", a)
	}
	return f, clk
}

// While the breaker probes, the daemon hands one probe permit a probe
// interval, only to clients holding parked calls.
func TestProbePermitsGoToParkedCalls(t *testing.T) {
	t.Parallel()
	f, clk := openWithParked(t)
	clk.advance(f.Config().Breaker.OpenFor)
	if a := f.Assign(streamTarget, "idle"); a.Breaker != HalfOpen || a.ProbePermits != 0 {
		t.Fatalf("a client without parked calls: %+v", a)
	}
	if a := f.Assign(streamTarget, "p1"); a.ProbePermits != 1 {
		t.Fatalf("the first parked client: %+v, want a permit", a)
	}
	if a := f.Assign(streamTarget, "p2"); a.ProbePermits != 0 {
		t.Fatalf("a second permit in the same interval: %+v", a)
	}
	clk.advance(f.Config().Breaker.ProbeInterval)
	if a := f.Assign(streamTarget, "p2"); a.ProbePermits != 1 {
		t.Fatalf("the next interval: %+v, want a permit", a)
	}
}

// At the close, every client holding parked calls gets a release slot over
// a window sized so that the backlog drains at ReleaseFactor times the
// traffic before the incident: the slots differ, and the last is within
// the window. A client without parked calls waits for no slot.
func TestCloseReleasesParkedCallsInSlots(t *testing.T) {
	t.Parallel()
	f, clk := openWithParked(t)
	clk.advance(f.Config().Breaker.OpenFor)
	f.Report(Usage{Target: streamTarget, ClientID: "p1", Succeeded: 2, Parked: 1})
	if a := f.Assign(streamTarget, "idle"); a.Breaker != Closed || a.Hold != 0 {
		t.Fatalf("a client without parked calls: %+v, want no release slot", a)
	}
	perSecond := ReleaseFactor * 20.0
	window := time.Duration(4 / perSecond * float64(time.Second))
	seen := map[time.Duration]bool{}
	for _, c := range []string{"p1", "p2", "p3", "p4"} {
		a := f.Assign(streamTarget, c)
		if a.Breaker != Closed || a.Hold >= window || seen[a.Hold] {
			t.Fatalf("%s: %+v, want closed with a slot of its own under %v", c, a, window)
		}
		seen[a.Hold] = true
	}
	clk.advance(window)
	if a := f.Assign(streamTarget, "p4"); a.Hold != 0 || !a.Admits() {
		t.Fatalf("after the release window: %+v", a)
	}
}

// A streamed client's retry behind an open breaker is not stopped at the
// longest wait nor sent to sleep: its gate parks it and the daemon wakes it.
func TestStreamedRetryParksBehindTheBreaker(t *testing.T) {
	t.Parallel()
	f, _ := openWithParked(t)
	f.Report(Usage{Target: streamTarget, ClientID: "p1", Parked: 1})
	tests := []struct {
		name, client string
		retry        bool
	}{
		{name: "streamed: retries, the gate parks it", client: "p1", retry: true},
		{name: "not streamed: waits or stops", client: "nostream", retry: false},
	}
	for _, tt := range tests {
		a := ask(tt.client, overloaded, time.Second)
		a.MaxWait = 2 * time.Second // under the open period
		ans := f.Decide(a)
		if ans.Retry != tt.retry || (tt.retry && ans.Delay != time.Second) || ans.State == nil || ans.State.Breaker != Open {
			t.Errorf("%s: %+v", tt.name, ans)
		}
	}
}

// The fleet's parked calls are this replica's and the others' as their
// counts say, not this replica's times the replicas: the streams need not
// spread evenly. Stale counts (a replica gone) are left out.
func TestFleetParkedCountsEveryReplica(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	b := &Bucket{}
	b.reportParked("c1", 3)
	b.remote = map[string]remoteCounts{
		"r2": {at: now.Add(-time.Second), Counts: Counts{Parked: 5}},
		"r3": {at: now, Counts: Counts{}},
		"r4": {at: now.Add(-time.Hour), Counts: Counts{Parked: 100}},
	}
	if got := b.fleetParked(now); got != 8 {
		t.Fatalf("fleet parked = %d, want 3 here + 5 on r2 (r3 holds none, r4's counts are stale)", got)
	}
}

// The release window drains the fleet's backlog at factor × the traffic
// before the incident, within maxRelease; where that traffic is unknown (a
// replica that started after the breaker opened) the backlog is spread
// over maxRelease, never released at once.
func TestReleaseWindowFollowsTheTrafficBefore(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		parked   int
		baseRate float64
		want     time.Duration
	}{
		{name: "the backlog at factor × the traffic before", parked: 12, baseRate: 5, want: time.Duration(12 / (ReleaseFactor * 5) * float64(time.Second))},
		{name: "a backlog too long for the window drains faster", parked: 200, baseRate: 5, want: maxRelease},
		{name: "the traffic before unknown: over the longest window", parked: 12, want: maxRelease},
		{name: "nothing parked: no window", parked: 0, baseRate: 5, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := &Bucket{}
			for i := range tt.parked {
				b.reportParked(fmt.Sprintf("c%d", i), 1)
			}
			b.baseRate = tt.baseRate
			b.startRelease(now, ReleaseFactor, false)
			if b.releaseSpan != tt.want {
				t.Fatalf("release window %v, want %v", b.releaseSpan, tt.want)
			}
		})
	}
}

// The release window is front-loaded: of 64 slots, more than half fall in
// its first half at the pace's curve (the van der Corput points alone put
// exactly half there),
// every slot stays inside the window, and a later point is released later.
func TestReleaseWindowIsFrontLoaded(t *testing.T) {
	t.Parallel()
	const window = 8 * time.Second
	early := 0
	for i := range 64 {
		d := releaseOffset(slot(i, window), window, paceReleaseCurve)
		if d < 0 || d >= window {
			t.Fatalf("slot %d at %v, outside the %v window", i, d, window)
		}
		if d < window/2 {
			early++
		}
	}
	if early <= 32 || early > 40 {
		t.Fatalf("%d of 64 slots in the window's first half, want about 37 (u^1.3 < ½ for u < 0.59)", early)
	}
	if a, b := releaseOffset(2*time.Second, window, closeReleaseCurve), releaseOffset(3*time.Second, window, closeReleaseCurve); a >= b || a >= 2*time.Second {
		t.Fatalf("offsets %v and %v: want increasing, and earlier than the point itself", a, b)
	}
}
