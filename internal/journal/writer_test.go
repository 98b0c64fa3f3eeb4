package journal_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/policyd/policyd/internal/journal"
	"github.com/policyd/policyd/internal/journal/journaltest"
)

// attemptRows counts the attempt rows of context id, whatever its tenant
// and whether or not the context still exists.
func attemptRows(t *testing.T, url, id string) int {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM retry_attempts WHERE context_id = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// writePaths runs test under both of the writers' paths: the single
// INSERT statement (COPY off) and COPY for every batch, checking that the
// second took COPY.
func writePaths(t *testing.T, test func(t *testing.T, opts ...journal.Option) *journal.Store) {
	t.Helper()
	t.Run("insert", func(t *testing.T) {
		t.Parallel()
		if s := test(t, journal.WithCopyMinRows(0)); journal.Copies(s) != 0 {
			t.Errorf("%d batches written with COPY, want none", journal.Copies(s))
		}
	})
	t.Run("copy", func(t *testing.T) {
		t.Parallel()
		if s := test(t, journal.WithCopyMinRows(1)); journal.Copies(s) == 0 {
			t.Error("no batch was written with COPY")
		}
	})
}

// A writer remembers the contexts it has written and stops asking
// PostgreSQL to begin them; when one of them was pruned meanwhile, the next
// attempt still begins it again, as Record promises.
func TestRecordAfterItsContextWasPruned(t *testing.T) {
	t.Parallel()
	writePaths(t, func(t *testing.T, opts ...journal.Option) *journal.Store {
		ctx := context.Background()
		clk := newClock(t0)
		url := journaltest.DatabaseURL(t)
		s := openStoreAt(t, url, append(opts, journal.WithClock(clk.Now), journal.WithWriters(1))...)
		id := uuid.NewString()
		ensure := journal.Context{Provider: "openai"}
		if _, err := s.Record(ctx, "acme", journal.Attempt{ContextID: id, Attempt: 1}, ensure); err != nil {
			t.Fatal(err)
		}
		if n, err := s.Prune(ctx, t0.Add(time.Hour)); err != nil || n != 1 {
			t.Fatalf("Prune = %d, %v; want 1 context deleted", n, err)
		}
		if got := attemptRows(t, url, id); got != 0 {
			t.Fatalf("after Prune the context has %d attempt rows, want 0: Prune must delete attempts itself", got)
		}
		clk.Set(t0.Add(2 * time.Hour))
		inserted, err := s.Record(ctx, "acme", journal.Attempt{ContextID: id, Attempt: 2}, ensure)
		wantErr(t, err, nil)
		if !inserted {
			t.Fatal("inserted = false for the first attempt after the context was pruned")
		}
		c, attempts, err := s.GetContext(ctx, "acme", id)
		wantErr(t, err, nil)
		if c.Provider != "openai" || len(attempts) != 1 || attempts[0].Attempt != 2 || c.AttemptCount != 2 {
			t.Fatalf("context %+v with attempts %+v, want the context begun again with attempt #2", c, attempts)
		}
		return s
	})
}

// A writer that knows a context under one tenant still refuses another
// tenant's attempt on it, and does not learn the wrong tenant.
func TestRecordKnownContextOtherTenant(t *testing.T) {
	t.Parallel()
	writePaths(t, func(t *testing.T, opts ...journal.Option) *journal.Store {
		ctx := context.Background()
		s := openStore(t, append(opts, journal.WithWriters(1))...)
		id := uuid.NewString()
		record(t, s, "acme", journal.Attempt{ContextID: id, Attempt: 1})
		for range 2 { // the second time the writer has seen the refusal
			_, err := s.Record(ctx, "other", journal.Attempt{ContextID: id, Attempt: 2}, journal.Context{})
			wantErr(t, err, journal.ErrNotFound)
		}
		if !record(t, s, "acme", journal.Attempt{ContextID: id, Attempt: 2}) {
			t.Fatal("the owner's attempt #2 was not inserted")
		}
		return s
	})
}

// Prune also deletes attempts whose context is gone (recorded while Prune
// deleted their context: attempts have no foreign key).
func TestPruneDeletesOrphanedAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := journaltest.DatabaseURL(t)
	s := openStoreAt(t, url)
	orphan := uuid.NewString()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO retry_attempts (context_id, attempt, at) VALUES ($1, 1, $2)`, orphan, t0); err != nil {
		t.Fatal(err)
	}
	kept := uuid.NewString()
	if _, err := conn.Exec(ctx, `INSERT INTO retry_attempts (context_id, attempt, at) VALUES ($1, 1, $2)`, kept, t0.Add(48*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Prune(ctx, t0.Add(24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got := attemptRows(t, url, orphan); got != 0 {
		t.Errorf("an orphaned attempt from before the cut-off is still there (%d rows)", got)
	}
	if got := attemptRows(t, url, kept); got != 1 {
		t.Errorf("an orphaned attempt from after the cut-off was deleted too (%d rows, want 1)", got)
	}
}

// Every journal row carries its tenant: the context, its attempts and its
// error report.
func TestRowsCarryTheTenant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := journaltest.DatabaseURL(t)
	s := openStoreAt(t, url)
	id := uuid.NewString()
	if _, err := s.Record(ctx, "acme", journal.Attempt{ContextID: id, Attempt: 1, FailureType: "AUTH_INVALID"}, journal.Context{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.FinishContext(ctx, "acme", id, journal.OutcomeFailed); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, table := range []string{"retry_contexts", "retry_attempts", "error_reports"} {
		col := "context_id"
		if table == "retry_contexts" {
			col = "id"
		}
		var tenant string
		if err := conn.QueryRow(ctx, `SELECT tenant FROM `+table+` WHERE `+col+` = $1`, id).Scan(&tenant); err != nil {
			t.Fatalf("%s: %v", table, err)
		}
		if tenant != "acme" {
			t.Errorf("%s.tenant = %q, want acme", table, tenant)
		}
	}
}

// TestTwoStoresBeginTheSameContext: two stores (two replicas) record
// attempts of the same new context at the same moment, each beginning it.
// The one whose statement waits for the other's context row cannot see that
// row in its own snapshot; its attempt must still be written and reported
// inserted.
func TestTwoStoresBeginTheSameContext(t *testing.T) {
	t.Parallel()
	writePaths(t, func(t *testing.T, opts ...journal.Option) *journal.Store {
		ctx := context.Background()
		url := journaltest.DatabaseURL(t)
		a, b := openStoreAt(t, url, opts...), openStoreAt(t, url, opts...)
		const contexts = 200
		ids := make([]string, contexts)
		for i := range ids {
			ids[i] = uuid.NewString()
		}
		var wg sync.WaitGroup
		for _, id := range ids {
			start := make(chan struct{})
			for n, s := range []*journal.Store{a, b} {
				wg.Go(func() {
					<-start
					ok, err := s.Record(ctx, "acme", journal.Attempt{ContextID: id, Attempt: n + 1, FailureType: "RATE_LIMIT"},
						journal.Context{Provider: "openai"})
					if err != nil || !ok {
						t.Errorf("context %s attempt %d: inserted %v, error %v; want inserted", id, n+1, ok, err)
					}
				})
			}
			close(start)
			wg.Wait()
		}
		for _, id := range ids {
			_, attempts, err := a.GetContext(ctx, "acme", id)
			wantErr(t, err, nil)
			if len(attempts) != 2 {
				t.Errorf("context %s has %d attempts, want 2", id, len(attempts))
			}
		}
		return a
	})
}
