package fleet

import (
	"maps"
	"testing"
	"time"
)

// A bucket's shed events count what the gates did not send at once: the
// first attempts shed, those of them sent to a fallback, and those parked,
// at most one event a second (the reports within the second are in the
// next), every call of a report over a long interval, and a reason that
// says which of them the event holds.
func TestShedEventsCountParkedAndFallenBack(t *testing.T) {
	t.Parallel()
	f, clk, rec := newTestFleet(t, nil)
	type want struct {
		client, why string
		counts      map[string]int64
	}
	steps := []struct {
		after time.Duration
		u     Usage
		want  *want // nil: no shed event
	}{
		{0, Usage{ClientID: "a", Shed: 3, FellBack: 1, ParkedNew: 2},
			&want{"a", "clients' gates parked first attempts and did not admit others, sending some to a fallback",
				map[string]int64{"shed": 3, "fell_back": 1, "parked": 2}}},
		// Within the second: held for the next event.
		{300 * time.Millisecond, Usage{ClientID: "b", ParkedNew: 4}, nil},
		{800 * time.Millisecond, Usage{ClientID: "a", Admitted: 2, ParkedNew: 1},
			&want{"a", "clients' gates parked first attempts", map[string]int64{"parked": 5}}},
		{time.Second, Usage{ClientID: "b", Shed: 2, FellBack: 2},
			&want{"b", "clients' gates did not admit first attempts, sending them to a fallback", map[string]int64{"shed": 2, "fell_back": 2}}},
		// Nothing shed or parked: no event.
		{time.Second, Usage{ClientID: "a", Admitted: 5, Released: 1}, nil},
		// Ten minutes' counts in one report: the breaker's window takes a
		// share of them, the event every one.
		{time.Second, Usage{ClientID: "c", Elapsed: 10 * time.Minute, Shed: 600},
			&want{"c", "clients' gates did not admit first attempts", map[string]int64{"shed": 600}}},
	}
	for i, s := range steps {
		clk.advance(s.after)
		rec.events = nil
		s.u.Target = streamTarget
		f.Report(s.u)
		var got []Event
		for _, e := range rec.events {
			if e.Kind == EventShed {
				got = append(got, e)
			}
		}
		if s.want == nil {
			if len(got) != 0 {
				t.Fatalf("step %d: shed events %+v, want none", i, got)
			}
			continue
		}
		// One event for each of the target's buckets: its availability
		// and its rate limit.
		if len(got) != 2 || got[0].Key.Scope == got[1].Key.Scope {
			t.Fatalf("step %d: shed events %+v, want one for each of the two buckets", i, got)
		}
		for _, e := range got {
			if e.ClientID != s.want.client || e.Reason != s.want.why || !maps.Equal(e.Counts, s.want.counts) || !e.At.Equal(clk.now()) {
				t.Errorf("step %d: %s event %q %q %v, want %q %q %v", i, e.Key, e.ClientID, e.Reason, e.Counts, s.want.client, s.want.why, s.want.counts)
			}
		}
	}
}
