package fleettest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/policyd/policyd/internal/dberr"
	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/fleet/fleettest"
)

func TestMemoryExchangeContract(t *testing.T) {
	t.Parallel()
	fleettest.ExerciseExchange(t, func(t *testing.T) fleettest.Open {
		space := fleettest.NewMemorySpace()
		return func(t testing.TB) fleet.Exchange {
			x := space.Open()
			t.Cleanup(x.Close)
			return x
		}
	})
}

// TestMemoryExchangeSweep: Sweep forgets ended, closed, quiet verdicts and
// replicas gone quiet, and nothing else.
func TestMemoryExchangeSweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := fleettest.T0
	clock := t0
	space := fleettest.NewMemorySpace()
	space.Now = func() time.Time { return clock }
	x := space.Open()
	ended := fleet.Key{Scope: fleet.ScopeRateLimit, Tenant: "acme", Provider: "openai", Model: "m", KeyID: "ended"}
	lasting := fleet.Key{Scope: fleet.ScopeRateLimit, Tenant: "acme", Provider: "openai", Model: "m", KeyID: "lasting"}
	open := fleet.Key{Scope: fleet.ScopeAvailability, Tenant: "acme", Provider: "openai", Model: "open"}
	if err := x.RaiseRegisters(ctx, []fleet.Verdict{
		{Key: ended, HoldUntil: t0.Add(time.Second)}, {Key: lasting, HoldUntil: t0.Add(2 * time.Hour)},
	}); err != nil {
		t.Fatal(err)
	}
	if _, won, err := x.MoveBreaker(ctx, fleet.Verdict{Key: open, Breaker: fleet.Open}, 0); err != nil || !won {
		t.Fatalf("MoveBreaker: won %v, %v", won, err)
	}
	for i, at := range []time.Time{t0, t0.Add(50 * time.Minute)} {
		if err := x.PublishCounts(ctx, fleet.ReplicaCounts{Replica: []string{"r0", "r1"}[i], At: at}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := x.Sweep(ctx, t0.Add(time.Minute), time.Hour); err != nil || n != 0 {
		t.Fatalf("Sweep = %d, %v; want 0 rows", n, err)
	}
	clock = t0.Add(2 * time.Hour)
	if n, err := x.Sweep(ctx, t0.Add(time.Hour), 30*time.Minute); err != nil || n != 2 {
		t.Fatalf("Sweep = %d, %v; want 2 rows (the ended hold, replica r0)", n, err)
	}
	ch, err := x.Read(ctx, "x", 0, 0)
	if err != nil || len(ch.Verdicts) != 2 || len(ch.Counts) != 1 || ch.Counts[0].Replica != "r1" {
		t.Fatalf("after the sweep: %+v, %v", ch, err)
	}
}

// TestMemoryExchangeClosed: a closed exchange answers ErrUnavailable, like
// a closed PostgreSQL exchange, and is woken no more.
func TestMemoryExchangeClosed(t *testing.T) {
	t.Parallel()
	space := fleettest.NewMemorySpace()
	a, b := space.Open(), space.Open()
	b.Close()
	if _, err := b.Read(context.Background(), "b", 0, 0); !errors.Is(err, dberr.ErrUnavailable) {
		t.Fatalf("Read on a closed exchange: %v, want ErrUnavailable", err)
	}
	if err := a.RaiseRegisters(context.Background(), []fleet.Verdict{{Key: fleet.Key{Scope: fleet.ScopeAuth, Tenant: "t", KeyID: "k"},
		StopUntil: fleettest.T0.Add(time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	if fleettest.Woke(b, 50*time.Millisecond) {
		t.Fatal("a closed exchange was woken")
	}
}
