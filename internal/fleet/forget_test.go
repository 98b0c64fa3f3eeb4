package fleet_test

import (
	"testing"
	"time"

	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/fleet/fleettest"
)

// buckets counts a fleet's buckets.
func buckets(f *fleet.Fleet) int { return f.Stats().Buckets }

// runFor steps every replica and ticks its clock each second for d.
func runFor(t *testing.T, rs []*replica, clk *clock, d time.Duration) {
	t.Helper()
	for el := time.Duration(0); el < d; el += time.Second {
		clk.advance(time.Second)
		for _, r := range rs {
			r.f.Tick()
		}
		stepAll(t, rs)
	}
}

// openByStreams opens the target's breaker with three streams' failures
// reported to rs[0], steps the replicas, and fails unless every one has it
// open.
func openByStreams(t *testing.T, rs []*replica) {
	t.Helper()
	for i := range 3 {
		rs[0].f.Report(fleet.Usage{Target: target, ClientID: string(rune('a' + i)), Failed: 10})
	}
	stepAll(t, rs)
	for _, r := range rs {
		if got := breakerOf(r.f); got != fleet.Open {
			t.Fatalf("replica %s: breaker %v, want open", r.f.Replica(), got)
		}
	}
}

func TestReplicasForgetABucketNobodyReportsOn(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	rs := replicas(t, fleettest.NewMemorySpace(), 2, clk)
	rs[0].f.Report(fleet.Usage{Target: target, ClientID: "c", Admitted: 5, Succeeded: 5})
	stepAll(t, rs)
	if n := buckets(rs[1].f); n == 0 {
		t.Fatalf("the other replica never heard of the bucket")
	}
	// IdleAfter (10 min) and a sweep later, nobody reported: every replica
	// forgets, and none keeps the other's copy alive.
	runFor(t, rs, clk, fleet.Defaults().IdleAfter+2*time.Minute)
	for _, r := range rs {
		if n := buckets(r.f); n != 0 {
			t.Errorf("replica %s still has %d buckets %v after its last report", r.f.Replica(), n, fleet.Defaults().IdleAfter+2*time.Minute)
		}
	}
}

func TestReplicasCloseAHalfOpenBreakerWhenTheStreamsAreGone(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	rs := replicas(t, fleettest.NewMemorySpace(), 2, clk)
	// Streams report on the bucket, then their failures open the breaker.
	openByStreams(t, rs)
	// The streams leave. A lone replica closes a half-open breaker CloseAfter
	// after the last counted failure once no stream reports; two replicas
	// must not keep it half-open by echoing each other's "streamed".
	cfg := fleet.Defaults().Breaker
	runFor(t, rs, clk, cfg.OpenFor+cfg.Window+cfg.CloseAfter+2*time.Second)
	for _, r := range rs {
		if got := breakerOf(r.f); got != fleet.Closed {
			t.Errorf("replica %s: breaker %v, want closed", r.f.Replica(), got)
		}
	}
}
