package fleet

import (
	"testing"
	"time"
)

// A target's cap on requests in flight is leased to the streaming clients
// by what each wants (in flight, parked, plus one), adding up to the cap.
func TestLeasesApportionTheCap(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		caps  map[string]int
		usage map[string][2]int64 // client → in flight, parked
		want  map[string]uint32
	}{
		{"by what each wants", map[string]int{"openai": 10},
			map[string][2]int64{"a": {4, 2}, "b": {1, 0}, "c": {0, 0}}, map[string]uint32{"a": 7, "b": 2, "c": 1}},
		{"more clients than the cap", map[string]int{"openai": 2},
			map[string][2]int64{"a": {0, 0}, "b": {0, 0}, "c": {0, 0}}, map[string]uint32{"a": 1, "b": 1, "c": 0}},
		{"a model's cap wins over its provider's", map[string]int{"openai": 100, "openai/gpt-4o": 4},
			map[string][2]int64{"a": {3, 0}, "b": {0, 0}}, map[string]uint32{"a": 3, "b": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, _, _ := newTestFleet(t, func(c *Config) { c.MaxInFlight = tt.caps })
			for _, client := range []string{"a", "b", "c"} {
				if u, ok := tt.usage[client]; ok {
					f.Report(Usage{Target: streamTarget, ClientID: client, Admitted: 1, InFlight: u[0], Parked: u[1]})
				}
			}
			sum := uint32(0)
			for client, want := range tt.want {
				a := f.Assign(streamTarget, client)
				if !a.Leased || a.InFlightLease != want {
					t.Errorf("%s: lease %d (leased %v), want %d", client, a.InFlightLease, a.Leased, want)
				}
				sum += a.InFlightLease
			}
			if limit := (&Config{MaxInFlight: tt.caps}).inFlightCap(streamTarget); int(sum) != limit {
				t.Errorf("leases add up to %d, want the cap %d", sum, limit)
			}
		})
	}
}

// Without a cap no lease is given; a client gone quiet leaves the
// apportionment.
func TestLeasesFollowTheStreams(t *testing.T) {
	t.Parallel()
	f, _, _ := newTestFleet(t, nil)
	f.Report(Usage{Target: streamTarget, ClientID: "a", Admitted: 1, InFlight: 2})
	if a := f.Assign(streamTarget, "a"); a.Leased {
		t.Fatalf("a lease without a cap: %+v", a)
	}
	f, clk, _ := newTestFleet(t, func(c *Config) { c.MaxInFlight = map[string]int{"openai": 6} })
	f.Report(Usage{Target: streamTarget, ClientID: "a", Admitted: 1, InFlight: 2})
	f.Report(Usage{Target: streamTarget, ClientID: "b", Admitted: 1, InFlight: 2})
	if a := f.Assign(streamTarget, "a"); a.InFlightLease != 3 {
		t.Fatalf("lease %d, want half of 6", a.InFlightLease)
	}
	clk.advance(11 * time.Second) // b's stream goes quiet past the window
	f.Report(Usage{Target: streamTarget, ClientID: "a", Admitted: 1, InFlight: 2})
	if a := f.Assign(streamTarget, "a"); a.InFlightLease != 6 {
		t.Fatalf("lease %d, want all 6 once b is gone", a.InFlightLease)
	}
}
