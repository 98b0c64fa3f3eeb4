package fleet_test

import (
	"strings"
	"testing"
	"time"

	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/fleet/fleettest"
)

// The output pace counts every replica's calls at the whole fleet's
// average output a call: a replica whose own clients reported no output
// yet paces on the others' usage, and on the limit they learnt.
func TestOutputPaceAcrossReplicas(t *testing.T) {
	clk := &clock{t: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)}
	rs := replicas(t, fleettest.NewMemorySpace(), 2, clk)
	// Replica a: two clients, 10 calls a second in all, 400 output tokens a
	// call, an output limit of 1,000 tokens a second.
	for _, client := range []string{"a1", "a2"} {
		rs[0].f.Report(fleet.Usage{Target: target, ClientID: client, Admitted: 50, OutputTokensPerMinute: 60000,
			OutputTokensUsed: 20000, OutputCalls: 50})
	}
	// Replica b: 10 calls a second too, no output reported, no limit learnt.
	rs[1].f.Report(fleet.Usage{Target: target, ClientID: "b1", Admitted: 100})
	if a := rs[1].f.Assign(target, "b1"); a.AdmitFraction != 1 {
		t.Fatalf("replica b paced before it heard of the limit: %+v", a)
	}
	stepAll(t, rs)
	// The fleet: 20 calls a second × 400 tokens against 1,000 a second.
	want := 0.93 * 1000 / (20 * 400)
	for _, r := range rs {
		a := r.f.Assign(target, "x")
		if a.AdmitFraction < want-0.01 || a.AdmitFraction > want+0.01 || !strings.Contains(a.Reason, "each call counted at 400 output tokens") {
			t.Errorf("replica %s: %+v, want a fraction about %.3f on the output limit", r.f.Replica(), a, want)
		}
	}
}
