package journal_test

import (
	"context"
	"testing"
	"time"

	"github.com/policyd/policyd/internal/journal"
)

func TestPrune(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Two contexts per statement, so that Prune has to loop.
	s := openStore(t, journal.WithPruneBatch(2))
	cutoff := t0.Add(24 * time.Hour)
	var old, kept []string
	for i, sp := range []struct {
		start   time.Time
		outcome journal.Outcome
		pruned  bool
	}{
		{t0, journal.OutcomeFailed, true},
		{t0.Add(time.Hour), journal.OutcomeResolved, true},
		{t0.Add(2 * time.Hour), journal.OutcomeAbandoned, true},
		{t0.Add(3 * time.Hour), journal.OutcomeResolved, true},
		{t0.Add(4 * time.Hour), journal.OutcomeInProgress, true}, // left open by a dead agent
		{cutoff, journal.OutcomeFailed, false},                   // not before the cut-off
		{cutoff.Add(time.Hour), journal.OutcomeInProgress, false},
	} {
		c := begin(t, s, journal.Context{Tenant: "acme", StartedAt: sp.start})
		record(t, s, "acme", journal.Attempt{ContextID: c.ID, Attempt: 1, FailureType: "AUTH_INVALID", At: sp.start})
		if sp.outcome != journal.OutcomeInProgress {
			if _, _, err := s.FinishContext(ctx, "acme", c.ID, sp.outcome); err != nil {
				t.Fatalf("context %d: %v", i, err)
			}
		}
		if sp.pruned {
			old = append(old, c.ID)
		} else {
			kept = append(kept, c.ID)
		}
	}
	// Fleet events go by the same cut-off; five old ones take Prune three
	// statements of two.
	var events []journal.FleetEvent
	for _, at := range []time.Time{t0, t0.Add(time.Hour), t0.Add(2 * time.Hour), t0.Add(3 * time.Hour),
		cutoff.Add(-time.Microsecond), cutoff, cutoff.Add(time.Hour)} {
		events = append(events, journal.FleetEvent{At: at, Tenant: "acme", Bucket: "b", Scope: journal.FleetScopeAuth,
			Event: journal.FleetStop})
	}
	wantErr(t, s.RecordFleetEvents(ctx, events), nil)

	n, err := s.Prune(ctx, cutoff)
	wantErr(t, err, nil)
	if n != int64(len(old)) {
		t.Fatalf("Prune deleted %d contexts, want %d", n, len(old))
	}
	for _, id := range old {
		_, _, err := s.GetContext(ctx, "acme", id)
		wantErr(t, err, journal.ErrNotFound)
		_, err = s.GetErrorReport(ctx, "acme", id)
		wantErr(t, err, journal.ErrNotFound)
	}
	for _, id := range kept {
		_, attempts, err := s.GetContext(ctx, "acme", id)
		wantErr(t, err, nil)
		if len(attempts) != 1 {
			t.Fatalf("kept context %s has %d attempts, want 1", id, len(attempts))
		}
	}
	left, err := s.ListFleetEvents(ctx, "acme", "", time.Time{}, 0)
	wantErr(t, err, nil)
	if len(left) != 2 || !left[0].At.Equal(cutoff.Add(time.Hour)) || !left[1].At.Equal(cutoff) {
		t.Fatalf("fleet events left after Prune: %+v, want the two from the cut-off on", left)
	}
	if n, err := s.Prune(ctx, cutoff); err != nil || n != 0 {
		t.Fatalf("second Prune = %d, %v; want 0, nil", n, err)
	}
	_, err = s.Prune(ctx, time.Time{})
	wantField(t, err, "older_than")
}
