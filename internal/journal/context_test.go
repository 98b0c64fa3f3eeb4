package journal_test

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/policyd/policyd/internal/journal"
)

func TestBeginContext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := newClock(t0)
	s := openStore(t, journal.WithClock(clk.Now))

	t.Run("generated id", func(t *testing.T) {
		c, created, err := s.BeginContext(ctx, journal.Context{Tenant: "acme", Agent: "coder", Provider: "openai",
			Model: "gpt-4o", Operation: "chat", Profile: "default", Labels: map[string]string{"run": "42"}})
		wantErr(t, err, nil)
		if !created {
			t.Fatal("created = false for a new context")
		}
		if u, err := uuid.Parse(c.ID); err != nil || u.Version() != 7 {
			t.Fatalf("ID = %q, want a version 7 (time-ordered) UUID", c.ID)
		}
		// Ids made later sort later (the primary key grows at its right edge).
		time.Sleep(2 * time.Millisecond)
		later, _, err := s.BeginContext(ctx, journal.Context{Tenant: "acme"})
		wantErr(t, err, nil)
		if later.ID <= c.ID {
			t.Errorf("a later context's id %s sorts before %s", later.ID, c.ID)
		}
		want := journal.Context{ID: c.ID, Tenant: "acme", Agent: "coder", Provider: "openai", Model: "gpt-4o",
			Operation: "chat", Profile: "default", Labels: map[string]string{"run": "42"}, StartedAt: t0,
			Outcome: journal.OutcomeInProgress}
		equalContext(t, c, want)
	})

	t.Run("supplied id is idempotent", func(t *testing.T) {
		id := uuid.NewString()
		start := t0.Add(-time.Minute)
		first, created, err := s.BeginContext(ctx, journal.Context{ID: strings.ToUpper(id), Tenant: "acme", Provider: "anthropic", StartedAt: start})
		wantErr(t, err, nil)
		if !created || first.ID != id || !first.StartedAt.Equal(start) {
			t.Fatalf("first BeginContext = %+v, created %v; want id %s (canonical), started %v, created", first, created, id, start)
		}
		again, created, err := s.BeginContext(ctx, journal.Context{ID: id, Tenant: "acme", Provider: "something else"})
		wantErr(t, err, nil)
		if created {
			t.Fatal("created = true for an existing context")
		}
		equalContext(t, again, first)
	})

	t.Run("another tenant's id is not found", func(t *testing.T) {
		c := begin(t, s, journal.Context{Tenant: "acme"})
		_, _, err := s.BeginContext(ctx, journal.Context{ID: c.ID, Tenant: "other"})
		wantErr(t, err, journal.ErrNotFound)
		_, _, err = s.GetContext(ctx, "other", c.ID)
		wantErr(t, err, journal.ErrNotFound)
		_, err = s.Record(ctx, "other", journal.Attempt{ContextID: c.ID, Attempt: 1}, journal.Context{})
		wantErr(t, err, journal.ErrNotFound)
		_, _, err = s.FinishContext(ctx, "other", c.ID, journal.OutcomeFailed)
		wantErr(t, err, journal.ErrNotFound)
		// Nothing leaked into the context.
		got, attempts, err := s.GetContext(ctx, "acme", c.ID)
		wantErr(t, err, nil)
		if got.Outcome != journal.OutcomeInProgress || len(attempts) != 0 {
			t.Fatalf("context = %+v with %d attempts, want untouched", got, len(attempts))
		}
	})
}

func TestBeginContextInvalid(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	labels := func(n int) map[string]string {
		m := map[string]string{}
		for i := range n {
			m[strings.Repeat("k", 1+i%60)+string(rune('a'+i%26))+string(rune('a'+i/26))] = "v"
		}
		return m
	}
	tests := []struct {
		name      string
		c         journal.Context
		wantField string
	}{
		{"id not a UUID", journal.Context{ID: "ctx-1"}, "context_id"},
		{"id without dashes", journal.Context{ID: strings.ReplaceAll(uuid.NewString(), "-", "")}, "context_id"},
		{"tenant too long", journal.Context{Tenant: strings.Repeat("t", 257)}, "tenant"},
		{"agent with NUL", journal.Context{Agent: "a\x00b"}, "agent"},
		{"provider not UTF-8", journal.Context{Provider: "\xff"}, "provider"},
		{"model too long", journal.Context{Model: strings.Repeat("é", 257)}, "model"},
		{"too many labels", journal.Context{Labels: labels(65)}, "labels"},
		{"empty label key", journal.Context{Labels: map[string]string{"": "v"}}, "labels"},
		{"label value too long", journal.Context{Labels: map[string]string{"k": strings.Repeat("v", 257)}}, "labels"},
		{"labels too large", journal.Context{Labels: func() map[string]string {
			m := map[string]string{}
			for i := range 20 {
				m[strings.Repeat("k", 10)+string(rune('a'+i))] = strings.Repeat("v", 250)
			}
			return m
		}()}, "labels"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := s.BeginContext(context.Background(), tt.c)
			wantField(t, err, tt.wantField)
		})
	}
	// At the limits is fine.
	c := begin(t, s, journal.Context{Tenant: strings.Repeat("t", 256), Model: strings.Repeat("é", 256), Labels: labels(64)})
	if len(c.Labels) != 64 {
		t.Fatalf("labels = %d, want 64", len(c.Labels))
	}
}

func TestFinishContext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := newClock(t0)
	s := openStore(t, journal.WithClock(clk.Now))

	tests := []struct {
		name       string
		outcome    journal.Outcome
		wantReport bool
	}{
		{"resolved", journal.OutcomeResolved, false},
		{"abandoned", journal.OutcomeAbandoned, false},
		{"failed", journal.OutcomeFailed, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := begin(t, s, journal.Context{Tenant: "acme"})
			record(t, s, "acme", journal.Attempt{ContextID: c.ID, Attempt: 1, FailureType: "SERVER_ERROR",
				Decision: journal.DecisionRetry, Delay: time.Second, At: t0})
			clk.Set(t0.Add(5 * time.Second))
			got, report, err := s.FinishContext(ctx, "acme", c.ID, tt.outcome)
			wantErr(t, err, nil)
			if got.Outcome != tt.outcome || !got.FinishedAt.Equal(t0.Add(5*time.Second)) || got.AttemptCount != 1 || got.TotalWait != time.Second {
				t.Fatalf("finished context = %+v", got)
			}
			if (report != nil) != tt.wantReport {
				t.Fatalf("report = %v, want one: %v", report, tt.wantReport)
			}
			stored, err := s.GetErrorReport(ctx, "acme", c.ID)
			if !tt.wantReport {
				wantErr(t, err, journal.ErrNotFound)
			} else {
				wantErr(t, err, nil)
				if stored.Text != report.Text || stored.RootCauseType != "SERVER_ERROR" || len(stored.Attempts) != 1 {
					t.Fatalf("stored report = %+v, want the one FinishContext returned", stored)
				}
			}

			// Finishing again the same way is fine and changes nothing.
			clk.Set(t0.Add(time.Hour))
			again, againReport, err := s.FinishContext(ctx, "acme", c.ID, tt.outcome)
			wantErr(t, err, nil)
			equalContext(t, again, got)
			if tt.wantReport && (againReport == nil || againReport.Text != report.Text || !againReport.CreatedAt.Equal(report.CreatedAt)) {
				t.Fatalf("report after finishing twice = %+v, want the first", againReport)
			}

			// Another outcome is refused.
			other := journal.OutcomeResolved
			if tt.outcome == journal.OutcomeResolved {
				other = journal.OutcomeFailed
			}
			_, _, err = s.FinishContext(ctx, "acme", c.ID, other)
			wantField(t, err, "outcome")
			if !strings.Contains(err.Error(), "already finished as "+string(tt.outcome)) {
				t.Fatalf("error = %v, want it to say how the context finished", err)
			}
		})
	}

	t.Run("invalid", func(t *testing.T) {
		c := begin(t, s, journal.Context{Tenant: "acme"})
		for _, o := range []journal.Outcome{journal.OutcomeInProgress, "", "done"} {
			_, _, err := s.FinishContext(ctx, "acme", c.ID, o)
			wantField(t, err, "outcome")
		}
		_, _, err := s.FinishContext(ctx, "acme", "nope", journal.OutcomeFailed)
		wantField(t, err, "context_id")
		_, _, err = s.FinishContext(ctx, "acme", uuid.NewString(), journal.OutcomeFailed)
		wantErr(t, err, journal.ErrNotFound)
		_, err = s.GetErrorReport(ctx, "acme", c.ID) // in progress: no report
		wantErr(t, err, journal.ErrNotFound)
	})
}

// equalContext fails t unless got equals want.
func equalContext(t testing.TB, got, want journal.Context) {
	t.Helper()
	if want.Labels == nil {
		want.Labels = map[string]string{}
	}
	if got.ID != want.ID || got.Tenant != want.Tenant || got.Agent != want.Agent || got.Provider != want.Provider ||
		got.Model != want.Model || got.Operation != want.Operation || got.Profile != want.Profile ||
		!maps.Equal(got.Labels, want.Labels) || !got.StartedAt.Equal(want.StartedAt) ||
		!got.FinishedAt.Equal(want.FinishedAt) || got.Outcome != want.Outcome ||
		got.AttemptCount != want.AttemptCount || got.TotalWait != want.TotalWait {
		t.Fatalf("context =\n%+v\nwant\n%+v", got, want)
	}
}
