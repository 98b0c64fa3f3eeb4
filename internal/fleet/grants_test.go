package fleet

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// pacedWithParked paces streamTarget at about 9.3 first attempts a second
// (a corroborated limit of 600 a minute at Pacing.Share 0.93) and has n
// clients report one parked call each, 10 ms apart, c00 first.
func pacedWithParked(t *testing.T, n int) (*Fleet, *fakeClock) {
	t.Helper()
	f, clk, _ := newTestFleet(t, nil)
	for i := range n {
		// 200 calls in the window in all: 20 a second, twice the limit.
		f.Report(Usage{Target: streamTarget, ClientID: fmt.Sprintf("c%02d", i), Admitted: int64(200 / n), RequestsPerMinute: 600})
	}
	for i := range n {
		clk.advance(10 * time.Millisecond)
		f.Report(Usage{Target: streamTarget, ClientID: fmt.Sprintf("c%02d", i), Parked: 1, ParkedNew: 1, RequestsPerMinute: 600})
	}
	return f, clk
}

// A paced bucket grants first attempts one at a time, the longest parked
// first, at the pace's rate, and each client's assignment counts its
// grants: with grants removed, the gates would draw (AdmitFraction only).
func TestPaceGrantsGoToTheLongestParkedAtThePacesRate(t *testing.T) {
	t.Parallel()
	f, clk := pacedWithParked(t, 100)
	a := f.Assign(streamTarget, "c99")
	if !a.Permits || a.Cause != CausePacing || a.AdmitFraction >= 1 {
		t.Fatalf("assignment %+v, want grants for a paced bucket", a)
	}
	// The first Assign gives the grants due (half a second's worth: the
	// grants' clock may lag that much), to the clients parked longest.
	granted := 0
	for i := range 100 {
		n := f.Assign(streamTarget, fmt.Sprintf("c%02d", i)).PacePermits
		if n > 1 {
			t.Fatalf("c%02d: %d grants for one parked call", i, n)
		}
		if n == 1 && i != granted {
			t.Fatalf("c%02d granted before c%02d, which parked earlier", i, granted)
		}
		granted += int(n)
	}
	if granted < 4 || granted > 6 {
		t.Fatalf("%d granted at once, want about half a second's worth (4.65)", granted)
	}
	// Ten more seconds of assignments every 100 ms: the pace's rate.
	for i := range 100 {
		clk.advance(100 * time.Millisecond)
		if i%10 == 0 { // the limit is carried again, or it would expire
			f.Report(Usage{Target: streamTarget, ClientID: "headers", RequestsPerMinute: 600})
		}
		f.Assign(streamTarget, "c99")
	}
	total := uint64(0)
	for i := range 100 {
		total += f.Assign(streamTarget, fmt.Sprintf("c%02d", i)).PacePermits
	}
	if want := float64(granted) + 9.3*10; float64(total) < want-2 || float64(total) > want+2 {
		t.Fatalf("%d granted in all, want about %.0f (the pace's 9.3 a second for 10 s)", total, want)
	}
}

// A client is owed a grant for each parked call its unused grants do not
// cover; its reports of admitted calls use them, and a grant that never
// reached a call (its gate took the count as a baseline) is given again.
func TestPaceGrantsFollowTheClientsReports(t *testing.T) {
	t.Parallel()
	f, clk := pacedWithParked(t, 2) // a second client corroborates the limit
	if n := f.Assign(streamTarget, "c00").PacePermits; n != 1 {
		t.Fatalf("%d grants for one parked call, want 1", n)
	}
	clk.advance(time.Second)
	if n := f.Assign(streamTarget, "c00").PacePermits; n != 1 {
		t.Fatalf("%d grants while the first is unused, want still 1", n)
	}
	// Its call went, and another parked.
	f.Report(Usage{Target: streamTarget, ClientID: "c00", Admitted: 1, Released: 1, Parked: 1, ParkedNew: 1, RequestsPerMinute: 600})
	clk.advance(200 * time.Millisecond)
	if n := f.Assign(streamTarget, "c00").PacePermits; n != 2 {
		t.Fatalf("%d grants after the first was used and a call parked, want 2", n)
	}
	// The client keeps reporting it parked, admitting nothing: after
	// lostGrantAfter the grant is taken as lost, and given again.
	clk.advance(lostGrantAfter / 2)
	f.Report(Usage{Target: streamTarget, ClientID: "c00", Parked: 1, RequestsPerMinute: 600})
	if n := f.Assign(streamTarget, "c00").PacePermits; n != 2 {
		t.Fatalf("%d grants before the grant could be lost, want 2", n)
	}
	clk.advance(lostGrantAfter)
	f.Report(Usage{Target: streamTarget, ClientID: "c00", Parked: 1, RequestsPerMinute: 600})
	if n := f.Assign(streamTarget, "c00").PacePermits; n != 3 {
		t.Fatalf("%d grants after the client kept its call parked %v past its grant, want 3", n, lostGrantAfter)
	}
}

// When a pace's limit expires, its grants end and what it parked leaves in
// release slots, over a window sized for the backlog to drain at
// PaceReleaseFactor × the traffic before the pace (a close's ReleaseFactor
// would make it shorter).
func TestPaceEndReleasesTheParkedInSlots(t *testing.T) {
	t.Parallel()
	f, clk := pacedWithParked(t, 20) // 2 first attempts a second when the pace started
	f.Assign(streamTarget, "c00")
	clk.advance(LimitTTL + time.Second) // no header carries the limit again
	for i := range 20 {
		f.Report(Usage{Target: streamTarget, ClientID: fmt.Sprintf("c%02d", i), Parked: 1, Succeeded: 1})
	}
	paceFactor := PaceReleaseFactor
	window := min(maxRelease, time.Duration(20/(paceFactor*2)*float64(time.Second)))
	closeFactor := ReleaseFactor // as a close would size it
	closeWindow := time.Duration(20 / (closeFactor * 2) * float64(time.Second))
	seen, last := map[time.Duration]bool{}, time.Duration(0)
	for i := range 20 {
		a := f.Assign(streamTarget, fmt.Sprintf("c%02d", i))
		if a.Permits || a.Hold >= window || seen[a.Hold] || (a.Hold > 0) != strings.Contains(a.Reason, "parked calls released over") {
			t.Fatalf("c%02d: %+v, want no grants and a slot of its own under %v", i, a, window)
		}
		seen[a.Hold], last = true, max(last, a.Hold)
	}
	if last <= closeWindow {
		t.Fatalf("the last slot is %v after the pace's end, want past %v (the window at ReleaseFactor)", last, closeWindow)
	}
	clk.advance(window)
	if a := f.Assign(streamTarget, "c19"); a.Hold != 0 || !a.Admits() {
		t.Fatalf("after the release window: %+v", a)
	}
}
