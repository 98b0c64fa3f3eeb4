package journal_test

import (
	"context"
	"testing"
	"time"

	"github.com/policyd/policyd/internal/journal"
	"github.com/policyd/policyd/internal/journal/journaltest"
)

func TestAbandonIdle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := newClock(t0.Add(3 * time.Hour))
	url := journaltest.DatabaseURL(t)
	// Two contexts per statement, so that AbandonIdle has to loop.
	s := openStoreAt(t, url, journal.WithPruneBatch(2), journal.WithClock(clk.Now))
	idleSince := t0.Add(2 * time.Hour)
	tests := []struct {
		name     string
		start    time.Time
		attempt  time.Time // zero: none
		finished journal.Outcome
		want     journal.Outcome
	}{
		{name: "idle since its start", start: t0, want: journal.OutcomeAbandoned},
		{name: "idle since its last attempt", start: t0, attempt: t0.Add(time.Hour), want: journal.OutcomeAbandoned},
		{name: "idle, a third one", start: t0.Add(time.Minute), want: journal.OutcomeAbandoned},
		{name: "an attempt since", start: t0, attempt: idleSince.Add(time.Minute), want: journal.OutcomeInProgress},
		{name: "started since", start: idleSince.Add(time.Minute), want: journal.OutcomeInProgress},
		{name: "finished", start: t0, finished: journal.OutcomeResolved, want: journal.OutcomeResolved},
	}
	ids := make([]string, len(tests))
	for i, tc := range tests {
		c := begin(t, s, journal.Context{Tenant: "acme", StartedAt: tc.start})
		ids[i] = c.ID
		if !tc.attempt.IsZero() {
			record(t, s, "acme", journal.Attempt{ContextID: c.ID, Attempt: 1, FailureType: "OVERLOADED", At: tc.attempt})
		}
		if tc.finished != "" {
			if _, _, err := s.FinishContext(ctx, "acme", c.ID, tc.finished); err != nil {
				t.Fatal(err)
			}
		}
	}
	n, err := s.AbandonIdle(ctx, idleSince)
	wantErr(t, err, nil)
	if n != 3 {
		t.Errorf("AbandonIdle marked %d contexts, want 3", n)
	}
	for i, tc := range tests {
		c, _, err := s.GetContext(ctx, "acme", ids[i])
		wantErr(t, err, nil)
		if c.Outcome != tc.want {
			t.Errorf("%s: outcome %s, want %s", tc.name, c.Outcome, tc.want)
		}
		if tc.want == journal.OutcomeAbandoned && !c.FinishedAt.Equal(clk.Now().Truncate(time.Microsecond)) {
			t.Errorf("%s: finished at %v, want the sweep's time %v", tc.name, c.FinishedAt, clk.Now())
		}
	}
	// The views count them finished, not in progress.
	_, rows := journaltest.Query(t, url, `SELECT count(*) FILTER (WHERE outcome = 'in_progress'),
		count(*) FILTER (WHERE outcome = 'abandoned') FROM journal_wait_per_context`)
	if len(rows) != 1 || rows[0][0] != "2" || rows[0][1] != "3" {
		t.Errorf("journal_wait_per_context: in progress, abandoned = %v, want 2 and 3", rows)
	}
	if n, err := s.AbandonIdle(ctx, idleSince); err != nil || n != 0 {
		t.Errorf("second AbandonIdle = %d, %v; want 0, nil", n, err)
	}
	_, err = s.AbandonIdle(ctx, time.Time{})
	wantField(t, err, "idle_since")
}

// The sweeper runs by itself until its context ends.
func TestRunAbandoner(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	c := begin(t, s, journal.Context{Tenant: "acme", StartedAt: time.Now().Add(-time.Hour)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.RunAbandoner(ctx, 10*time.Second) // sweeps every second
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, _, err := s.GetContext(context.Background(), "acme", c.ID)
		wantErr(t, err, nil)
		if got.Outcome == journal.OutcomeAbandoned {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("outcome %s after 10s, want abandoned by the sweeper", got.Outcome)
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("RunAbandoner did not return after its context ended")
	}
}
