package fleet_test

import (
	"testing"
	"time"

	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/fleet/fleettest"
)

func TestClearReachesEveryReplicaAndIsJournaled(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	rs := replicas(t, fleettest.NewMemorySpace(), 2, clk)
	a := failure("a", rateLimited)
	a.RetryAfter = 4 * time.Minute
	rs[0].f.Decide(a)
	stepAll(t, rs)
	const name = "rate_limit:openai/gpt-4o@prod"
	if v, ok := rs[1].f.Bucket("team", name); !ok || v.State.HoldLeft == 0 {
		t.Fatalf("the hold did not reach the other replica: %+v", v.State)
	}
	who := fleet.Origin{Identity: "token:operator", Peer: "127.0.0.1:5000"}
	if _, ok := rs[1].f.Clear("team", name, fleet.Clearing{}, who, "provider confirmed the limit lifted"); !ok {
		t.Fatal("Clear found no bucket")
	}
	// Several rounds, full reads included: the cleared hold comes back on
	// neither replica.
	for range 7 {
		clk.advance(time.Second)
		stepAll(t, rs)
	}
	for _, r := range rs {
		if v, _ := r.f.Bucket("team", name); v.State.HoldLeft != 0 {
			t.Errorf("replica %s: hold %v left after the clear", r.f.Replica(), v.State.HoldLeft)
		}
	}
	if n := rs[1].ev.count(fleet.EventCleared); n != 1 {
		t.Errorf("%d fleet_clear events on the clearing replica, want 1", n)
	}
	// A new failure holds again.
	rs[0].f.Decide(a)
	stepAll(t, rs)
	if v, _ := rs[1].f.Bucket("team", name); v.State.HoldLeft == 0 {
		t.Error("a hold after the clear did not reach the other replica")
	}
}

func TestClearBreakerClosesIt(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	rs := replicas(t, fleettest.NewMemorySpace(), 2, clk)
	openByStreams(t, rs)
	if _, ok := rs[0].f.Clear("team", "availability:openai/gpt-4o", fleet.Clearing{Breaker: true}, fleet.Origin{}, ""); !ok {
		t.Fatal("no bucket")
	}
	stepAll(t, rs)
	for _, r := range rs {
		if got := breakerOf(r.f); got != fleet.Closed {
			t.Errorf("replica %s: breaker %v after the clear, want closed", r.f.Replica(), got)
		}
	}
}

func TestAReplicaTakesNoHoldPastItsCeiling(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	space := fleettest.NewMemorySpace()
	// A week's hold, as a daemon without a ceiling left it in the shared state.
	key := fleet.Key{Scope: fleet.ScopeRateLimit, Tenant: "team", Provider: "openai", Model: "gpt-4o", KeyID: "prod"}
	old := space.Open()
	if err := old.RaiseRegisters(t.Context(), []fleet.Verdict{{Key: key, HoldUntil: clk.now().Add(7 * 24 * time.Hour), HoldSpan: 7 * 24 * time.Hour}}); err != nil {
		t.Fatal(err)
	}
	rs := replicas(t, space, 1, clk)
	stepAll(t, rs)
	v, ok := rs[0].f.Bucket("team", "rate_limit:openai/gpt-4o@prod")
	if !ok || v.State.HoldLeft != fleet.Defaults().Hold.MaxHint {
		t.Fatalf("restored hold %v (found %v), want the ceiling %v", v.State.HoldLeft, ok, fleet.Defaults().Hold.MaxHint)
	}
	// Later reads, full ones included, do not renew it.
	for range 6 * 60 / 5 {
		clk.advance(5 * time.Second)
		stepAll(t, rs)
	}
	if v, _ := rs[0].f.Bucket("team", "rate_limit:openai/gpt-4o@prod"); v.State.HoldLeft != 0 {
		t.Fatalf("hold %v left six minutes later", v.State.HoldLeft)
	}
}
