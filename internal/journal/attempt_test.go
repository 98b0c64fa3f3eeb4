package journal_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/policyd/policyd/internal/journal"
	"github.com/policyd/policyd/internal/journal/journaltest"
)

func TestRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := newClock(t0)
	s := openStore(t, journal.WithClock(clk.Now))

	t.Run("inserted, then harmless to repeat", func(t *testing.T) {
		c := begin(t, s, journal.Context{Tenant: "acme", Provider: "openai", Model: "gpt-4o"})
		first := journal.Attempt{ContextID: c.ID, Attempt: 1, At: t0.Add(1500 * time.Microsecond), Duration: 250 * time.Millisecond,
			FailureType: "FAILURE_TYPE_RATE_LIMIT", Retryable: true, Rule: "status.429", HTTPStatus: 429,
			ErrorName: "RateLimitError", ErrorCode: "rate_limit_exceeded", Message: "Rate limit reached", RecoveryAction: "Wait and retry.",
			Decision: journal.DecisionRetry, Delay: 1500 * time.Millisecond, Strategy: "exponential 1s×2",
			Provider: "openai", Model: "gpt-4o"}
		if !record(t, s, "acme", first) {
			t.Fatal("inserted = false for a new attempt")
		}
		changed := first
		changed.Message, changed.Delay, changed.Decision = "another message", time.Hour, journal.DecisionStop
		if record(t, s, "acme", changed) {
			t.Fatal("inserted = true for an attempt already recorded")
		}
		got, attempts, err := s.GetContext(ctx, "acme", c.ID)
		wantErr(t, err, nil)
		want := first
		want.FailureType = "RATE_LIMIT"
		if len(attempts) != 1 || attempts[0] != want {
			t.Fatalf("attempts = %+v, want [%+v]", attempts, want)
		}
		if got.AttemptCount != 1 || got.TotalWait != 1500*time.Millisecond {
			t.Fatalf("totals = %d attempts, %v wait; want 1, 1.5s", got.AttemptCount, got.TotalWait)
		}
	})

	t.Run("an unknown context is begun from ensure", func(t *testing.T) {
		id := uuid.NewString()
		ensure := journal.Context{ID: "ignored", Tenant: "ignored", Agent: "coder", Provider: "anthropic", Operation: "chat",
			Labels: map[string]string{"run": "7"}}
		inserted, err := s.Record(ctx, "acme", journal.Attempt{ContextID: id, Attempt: 2, At: t0.Add(time.Second),
			Decision: journal.DecisionRetry, Delay: 2 * time.Second}, ensure)
		wantErr(t, err, nil)
		if !inserted {
			t.Fatal("inserted = false")
		}
		record(t, s, "acme", journal.Attempt{ContextID: id, Attempt: 1, At: t0, Decision: journal.DecisionRetry, Delay: time.Second})
		got, attempts, err := s.GetContext(ctx, "acme", id)
		wantErr(t, err, nil)
		equalContext(t, got, journal.Context{ID: id, Tenant: "acme", Agent: "coder", Provider: "anthropic", Operation: "chat",
			Labels: map[string]string{"run": "7"}, StartedAt: t0.Add(time.Second), Outcome: journal.OutcomeInProgress,
			AttemptCount: 2, TotalWait: 3 * time.Second})
		if len(attempts) != 2 || attempts[0].Attempt != 1 || attempts[1].Attempt != 2 {
			t.Fatalf("attempts = %+v, want #1 and #2 in order", attempts)
		}
	})

	t.Run("defaults and clipping", func(t *testing.T) {
		c := begin(t, s, journal.Context{Tenant: "acme"})
		long := strings.Repeat("é", 2000) + "\x00\xff"
		record(t, s, "acme", journal.Attempt{ContextID: c.ID, Attempt: 1, Message: long, StopReason: long,
			Rule: strings.Repeat("r", 300), ErrorName: strings.Repeat("n", 300), Delay: 1999 * time.Microsecond})
		_, attempts, err := s.GetContext(ctx, "acme", c.ID)
		wantErr(t, err, nil)
		a := attempts[0]
		if !a.At.Equal(t0) {
			t.Errorf("At = %v, want the clock's %v", a.At, t0)
		}
		if n := utf8.RuneCountInString(a.Message); n != journal.DefaultMessageChars || !strings.HasSuffix(a.Message, "…") {
			t.Errorf("message has %d characters, want %d ending in …", n, journal.DefaultMessageChars)
		}
		if n := utf8.RuneCountInString(a.StopReason); n != 1024 || !strings.HasSuffix(a.StopReason, "…") {
			t.Errorf("stop reason has %d characters, want 1024 ending in …", n)
		}
		if n := utf8.RuneCountInString(a.Rule); n != 256 {
			t.Errorf("rule has %d characters, want 256", n)
		}
		if n := utf8.RuneCountInString(a.ErrorName); n != 256 {
			t.Errorf("error name has %d characters, want 256", n)
		}
		if a.Delay != time.Millisecond || a.Decision != journal.DecisionNone {
			t.Errorf("delay %v decision %q, want 1ms and none", a.Delay, a.Decision)
		}
	})
}

func TestRecordInvalid(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	id := uuid.NewString()
	tests := []struct {
		name      string
		a         journal.Attempt
		ensure    journal.Context
		wantField string
	}{
		{"no context id", journal.Attempt{Attempt: 1}, journal.Context{}, "context_id"},
		{"bad context id", journal.Attempt{ContextID: "x", Attempt: 1}, journal.Context{}, "context_id"},
		{"attempt 0", journal.Attempt{ContextID: id, Attempt: 0}, journal.Context{}, "attempt"},
		{"attempt too high", journal.Attempt{ContextID: id, Attempt: journal.MaxAttempt + 1}, journal.Context{}, "attempt"},
		{"http status", journal.Attempt{ContextID: id, Attempt: 1, HTTPStatus: 42}, journal.Context{}, "http_status"},
		{"negative delay", journal.Attempt{ContextID: id, Attempt: 1, Delay: -time.Second}, journal.Context{}, "delay"},
		{"negative duration", journal.Attempt{ContextID: id, Attempt: 1, Duration: -1}, journal.Context{}, "duration"},
		{"decision", journal.Attempt{ContextID: id, Attempt: 1, Decision: "RETRY"}, journal.Context{}, "decision"},
		{"ensure provider", journal.Attempt{ContextID: id, Attempt: 1}, journal.Context{Provider: strings.Repeat("p", 300)}, "provider"},
		{"tenant", journal.Attempt{ContextID: id, Attempt: 1}, journal.Context{}, "tenant"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tenant := "acme"
			if tt.wantField == "tenant" {
				tenant = strings.Repeat("t", 300)
			}
			_, err := s.Record(context.Background(), tenant, tt.a, tt.ensure)
			wantField(t, err, tt.wantField)
		})
	}
}

// TestRecordConcurrently records from 50 goroutines, 20 attempts each,
// two goroutines per context racing on the same attempts: every attempt
// acknowledged is in the journal, exactly one call per attempt inserted it,
// and the contexts' totals are right; with one writer (the default) and
// with several, which commit concurrently.
func TestRecordConcurrently(t *testing.T) {
	t.Parallel()
	for _, writers := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d writers", writers), func(t *testing.T) {
			t.Parallel()
			recordConcurrently(t, openStore(t, journal.WithWriters(writers)))
		})
	}
	// Every batch with COPY, repeats (two goroutines record each attempt)
	// falling back to the INSERT that skips them.
	t.Run("copy", func(t *testing.T) {
		t.Parallel()
		s := openStore(t, journal.WithCopyMinRows(1), journal.WithBatchWindow(2*time.Millisecond))
		recordConcurrently(t, s)
		if journal.Copies(s) == 0 {
			t.Error("no batch was written with COPY")
		}
	})
}

func recordConcurrently(t *testing.T, s *journal.Store) {
	ctx := context.Background()
	const (
		goroutines = 50
		perG       = 20
		contexts   = goroutines / 2
	)
	ids := make([]string, contexts)
	for i := range ids {
		ids[i] = uuid.NewString()
	}
	var (
		inserted atomic.Int64
		wg       sync.WaitGroup
		errs     = make(chan error, goroutines*perG)
	)
	for g := range goroutines {
		wg.Go(func() {
			id := ids[g%contexts]
			for n := 1; n <= perG; n++ {
				// Contexts are begun by whichever call comes first.
				ok, err := s.Record(ctx, "acme", journal.Attempt{ContextID: id, Attempt: n, FailureType: "RATE_LIMIT",
					Decision: journal.DecisionRetry, Delay: time.Duration(n) * time.Millisecond}, journal.Context{Provider: "openai"})
				if err != nil {
					errs <- fmt.Errorf("goroutine %d attempt %d: %w", g, n, err)
					continue
				}
				if ok {
					inserted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := inserted.Load(); got != contexts*perG {
		t.Errorf("%d calls inserted, want %d (one per attempt)", got, contexts*perG)
	}
	for _, id := range ids {
		c, attempts, err := s.GetContext(ctx, "acme", id)
		wantErr(t, err, nil)
		if len(attempts) != perG || c.AttemptCount != perG || c.TotalWait != perG*(perG+1)/2*time.Millisecond || c.Provider != "openai" {
			t.Errorf("context %s: %d attempts, count %d, wait %v, provider %q; want %d, %d, %v, openai", id,
				len(attempts), c.AttemptCount, c.TotalWait, c.Provider, perG, perG, perG*(perG+1)/2*time.Millisecond)
		}
	}
}

func TestRecordCanceled(t *testing.T) {
	t.Parallel()
	// A long window keeps the call waiting, so its deadline passes first.
	s := openStore(t, journal.WithBatchWindow(time.Second))
	c := begin(t, s, journal.Context{Tenant: "acme"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := s.Record(ctx, "acme", journal.Attempt{ContextID: c.ID, Attempt: 1}, journal.Context{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("Record returned after %v, want promptly after its deadline", d)
	}
	// A done context never queues.
	_, err = s.Record(ctx, "acme", journal.Attempt{ContextID: c.ID, Attempt: 2}, journal.Context{})
	wantErr(t, err, context.DeadlineExceeded)
	// The store is fine.
	record(t, s, "acme", journal.Attempt{ContextID: c.ID, Attempt: 3})
}

func TestRecordAfterClose(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	c := begin(t, s, journal.Context{})
	s.Close()
	_, err := s.Record(context.Background(), "", journal.Attempt{ContextID: c.ID, Attempt: 1}, journal.Context{})
	wantErr(t, err, journal.ErrUnavailable)
	wantErr(t, s.Ready(context.Background()), journal.ErrUnavailable)
	s.Close() // twice is fine
}

// TestCloseFlushes closes the store while calls wait in the writer: each
// gets its answer, and what was acknowledged is there.
func TestCloseFlushes(t *testing.T) {
	t.Parallel()
	url := journaltest.DatabaseURL(t)
	s := openStoreAt(t, url, journal.WithBatchWindow(200*time.Millisecond))
	c := begin(t, s, journal.Context{})
	var wg sync.WaitGroup
	results := make([]error, 10)
	for i := range results {
		wg.Go(func() {
			_, results[i] = s.Record(context.Background(), "", journal.Attempt{ContextID: c.ID, Attempt: i + 1}, journal.Context{})
		})
	}
	time.Sleep(50 * time.Millisecond) // let them queue
	s.Close()
	wg.Wait()
	s2 := openStoreAt(t, url)
	_, attempts, err := s2.GetContext(context.Background(), "", c.ID)
	wantErr(t, err, nil)
	acked := 0
	for _, err := range results {
		if err == nil {
			acked++
		} else if !errors.Is(err, journal.ErrUnavailable) {
			t.Errorf("Record during Close: %v", err)
		}
	}
	if acked != 10 || len(attempts) != 10 {
		t.Fatalf("%d acknowledged, %d stored; want all 10", acked, len(attempts))
	}
}

// TestRecordMessageChars stores a message longer than the schema's old
// bound of 1024 characters under a raised WithMessageChars (PostgreSQL no
// longer re-checks the length: migration 007), and the failed context's
// report, whose root-cause column keeps its 1024-character bound, still
// writes.
func TestRecordMessageChars(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, journal.WithMessageChars(2000))
	c := begin(t, s, journal.Context{Tenant: "acme"})
	long := strings.Repeat("m", 3000)
	record(t, s, "acme", journal.Attempt{ContextID: c.ID, Attempt: 1, Message: long, FailureType: "RATE_LIMIT"})
	_, attempts, err := s.GetContext(ctx, "acme", c.ID)
	wantErr(t, err, nil)
	if n := utf8.RuneCountInString(attempts[0].Message); n != 2000 {
		t.Errorf("message has %d characters, want 2000 (WithMessageChars)", n)
	}
	_, report, err := s.FinishContext(ctx, "acme", c.ID, journal.OutcomeFailed)
	wantErr(t, err, nil)
	if n := utf8.RuneCountInString(report.RootCauseMessage); n != 1024 {
		t.Errorf("report's root-cause message has %d characters, want 1024", n)
	}
}
