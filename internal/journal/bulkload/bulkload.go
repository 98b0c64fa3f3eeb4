// Package bulkload fills a journal with finished contexts fast (COPY), for
// the benchmark that measures how the journal's cost grows with its size.
// It is not part of the daemon: RecordAttempt is the only way the daemon
// writes attempts.
package bulkload

import (
	"context"
	"fmt"
	"time"

	"github.com/policyd/policyd/internal/dberr"
	"github.com/policyd/policyd/internal/journal"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Load adds contexts finished contexts of attemptsPerContext attempts
// each to the journal at databaseURL with COPY, spread over the hour before
// at, and returns how many attempt rows it wrote. It exists for the
// benchmark that measures how the journal's cost grows with its size: COPY
// writes millions of rows in seconds, where RecordAttempt would take
// minutes.
func Load(ctx context.Context, databaseURL string, contexts, attemptsPerContext int, at time.Time) (int64, error) {
	if contexts < 0 || attemptsPerContext < 1 || attemptsPerContext > journal.MaxAttempt {
		return 0, fmt.Errorf("bulk load: %w", dberr.Invalid("attempts_per_context", "must be 1..%d", journal.MaxAttempt))
	}
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return 0, fmt.Errorf("bulk load: connect: %w", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	ids := make([]uuid.UUID, contexts)
	for i := range ids {
		ids[i] = uuid.New()
	}
	startOf := func(i int) time.Time {
		return at.Add(-time.Hour + time.Duration(i)*time.Hour/time.Duration(max(contexts, 1)))
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("bulk load: %w", err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // after Commit it is a no-op
	i := 0
	_, err = tx.CopyFrom(ctx, pgx.Identifier{"retry_contexts"},
		[]string{"id", "agent", "provider", "model", "operation", "profile", "started_at", "finished_at", "outcome"},
		pgx.CopyFromFunc(func() ([]any, error) {
			if i == len(ids) {
				return nil, nil
			}
			start := startOf(i)
			outcome := journal.OutcomeResolved
			if i%10 == 0 {
				outcome = journal.OutcomeFailed
			}
			row := []any{ids[i], "bench", []string{"openai", "anthropic", "google"}[i%3], "model-x", "chat", "default",
				start, start.Add(time.Minute), string(outcome)}
			i++
			return row, nil
		}))
	if err != nil {
		return 0, fmt.Errorf("bulk load: copy contexts: %w", err)
	}
	types := []string{"RATE_LIMIT", "OVERLOADED", "SERVER_ERROR", "TIMEOUT", "CONNECTION_ERROR"}
	c, a := 0, 1
	n, err := tx.CopyFrom(ctx, pgx.Identifier{"retry_attempts"},
		[]string{"context_id", "tenant", "attempt", "at", "failure_type", "retryable", "rule", "http_status", "message", "decision", "delay_ms", "strategy", "provider", "model"},
		pgx.CopyFromFunc(func() ([]any, error) {
			if c == len(ids) {
				return nil, nil
			}
			row := []any{ids[c], "bench", a, startOf(c).Add(time.Duration(a) * time.Second), types[(c+a)%len(types)], true, "bench",
				503, "The server is overloaded", journal.DecisionRetry, int64(1000), "default/OVERLOADED", "openai", "model-x"}
			if a++; a > attemptsPerContext {
				c, a = c+1, 1
			}
			return row, nil
		}))
	if err != nil {
		return 0, fmt.Errorf("bulk load: copy attempts: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("bulk load: commit: %w", err)
	}
	if _, err := conn.Exec(ctx, "ANALYZE retry_contexts; ANALYZE retry_attempts"); err != nil {
		return n, fmt.Errorf("bulk load: analyze: %w", err)
	}
	return n, nil
}

// AttemptRows returns how many attempt rows the journal at databaseURL
// holds.
func AttemptRows(ctx context.Context, databaseURL string) (int64, error) {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return 0, fmt.Errorf("count attempts: connect: %w", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	var n int64
	err = conn.QueryRow(ctx, "SELECT count(*) FROM retry_attempts").Scan(&n)
	return n, err
}
