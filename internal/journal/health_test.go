package journal_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/policyd/policyd/internal/journal"
	"github.com/policyd/policyd/internal/journal/journaltest"
)

// TestDatabaseOutage stops PostgreSQL under a running store: writes fail
// fast with ErrUnavailable and the store reports itself unhealthy; after a
// restart it finds the database again by itself and writes work.
func TestDatabaseOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := journaltest.NewServer(t) // our own cluster: stopping it disturbs no other test
	s := openStoreAt(t, srv.DatabaseURL(t))
	c := begin(t, s, journal.Context{Tenant: "acme"})
	record(t, s, "acme", journal.Attempt{ContextID: c.ID, Attempt: 1})
	if !s.Healthy() || s.Ready(ctx) != nil {
		t.Fatal("store not healthy before the outage")
	}

	srv.Stop(t)
	start := time.Now()
	_, err := s.Record(ctx, "acme", journal.Attempt{ContextID: c.ID, Attempt: 2}, journal.Context{})
	if !errors.Is(err, journal.ErrUnavailable) {
		t.Fatalf("Record with the database down: %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Record took %v to fail, want under 1s", d)
	} else {
		t.Logf("Record failed %v after the database stopped", d)
	}
	if s.Healthy() {
		t.Error("Healthy() = true with the database down")
	}
	wantErr(t, s.Ready(ctx), journal.ErrUnavailable)

	// While down, every call fails at once.
	calls := []struct {
		name string
		call func() error
	}{
		{"Record", func() error {
			_, err := s.Record(ctx, "acme", journal.Attempt{ContextID: c.ID, Attempt: 3}, journal.Context{})
			return err
		}},
		{"BeginContext", func() error { _, _, err := s.BeginContext(ctx, journal.Context{}); return err }},
		{"GetContext", func() error { _, _, err := s.GetContext(ctx, "acme", c.ID); return err }},
		{"FinishContext", func() error { _, _, err := s.FinishContext(ctx, "acme", c.ID, journal.OutcomeFailed); return err }},
		{"ListContexts", func() error { _, _, err := s.ListContexts(ctx, "acme", journal.Filter{}); return err }},
	}
	for _, call := range calls {
		start := time.Now()
		err := call.call()
		if !errors.Is(err, journal.ErrUnavailable) {
			t.Errorf("%s with the database down: %v, want ErrUnavailable", call.name, err)
		}
		if d := time.Since(start); d > 100*time.Millisecond {
			t.Errorf("%s took %v while the store is marked down, want at once", call.name, d)
		}
	}

	srv.Start(t)
	restarted := time.Now()
	deadline := restarted.Add(5 * time.Second)
	for !s.Healthy() {
		if time.Now().After(deadline) {
			t.Fatalf("store still unhealthy 5s after the restart: %v", s.Ready(ctx))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("store healthy %v after the restart", time.Since(restarted))
	wantErr(t, s.Ready(ctx), nil)
	if !record(t, s, "acme", journal.Attempt{ContextID: c.ID, Attempt: 2}) {
		t.Fatal("attempt 2 after the restart: inserted = false")
	}
	got, attempts, err := s.GetContext(ctx, "acme", c.ID)
	wantErr(t, err, nil)
	if len(attempts) != 2 || got.AttemptCount != 2 {
		t.Fatalf("after the restart: %d attempts, count %d; want 2, 2", len(attempts), got.AttemptCount)
	}
}

func TestOpenUnreachable(t *testing.T) {
	t.Parallel()
	start := time.Now()
	_, err := journal.Open(context.Background(), "postgres://postgres@127.0.0.1:1/x?sslmode=disable", journal.WithLogger(quiet))
	wantErr(t, err, journal.ErrUnavailable)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Open took %v to fail", d)
	}
	_, err = journal.Open(context.Background(), "postgres://%zz")
	wantField(t, err, "database_url")
}
