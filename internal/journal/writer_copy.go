package journal

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// DefaultCopyMinRows is WithCopyMinRows' default: off. Measured under make
// bench with 200 calls in flight, COPY from 64 rows answered about 10 %
// fewer journaled calls a second than the single INSERT, and from 128 rows
// about 5 % fewer: its three round trips cost more than it saves per row at
// the batch sizes the writer makes (docs/benchmarks.md).
const DefaultCopyMinRows = 0

const (
	// strangersSQL counts the (context, tenant) pairs whose context does not
	// exist for the tenant.
	strangersSQL = `
		SELECT count(*) FROM unnest($1::uuid[], $2::text[]) AS i(id, tenant)
		WHERE NOT EXISTS (SELECT 1 FROM retry_contexts c WHERE c.id = i.id AND c.tenant = i.tenant)`
)

// writeRowsCopy writes a large batch with COPY, in one transaction of three
// round trips: BEGIN, the contexts' ensure and a check that every attempt's
// context belongs to its tenant, pipelined; the COPY; the COMMIT. COPY
// cannot check each row's context as the INSERT does, hence the check
// before it. ok is false, with nothing written, when some attempt's context
// is missing or another tenant's: the caller then writes the batch with
// writeRows, which sorts out each row. An attempt already recorded fails
// the COPY with a unique violation, as the fast path does.
func (s *Store) writeRowsCopy(ctx context.Context, rows []*pending, ensure []Context) (results []result, ok bool, err error) {
	conn, err := s.writePool.Acquire(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("copy attempts: %w", err)
	}
	defer conn.Release()
	committed := false
	defer func() {
		if !committed {
			// A failed statement left the transaction aborted; a
			// connection broken mid-way is closed by the pool.
			_, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()

	ids, tenants := distinctPairs(rows)
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	if len(ensure) > 0 {
		b.Queue(ensureContextsSQL, contextArgs(ensure)...)
	}
	b.Queue(strangersSQL, ids, tenants)
	br := conn.SendBatch(ctx, b)
	var strangers int64
	_, err = br.Exec()
	if err == nil && len(ensure) > 0 {
		_, err = br.Exec()
	}
	if err == nil {
		err = br.QueryRow().Scan(&strangers)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, false, fmt.Errorf("copy attempts: ensure contexts: %w", err)
	}
	if strangers > 0 {
		return nil, false, nil
	}

	sorted := inAttemptOrder(rows)
	if _, err := conn.CopyFrom(ctx, pgx.Identifier{"retry_attempts"}, writtenColumnNames(),
		pgx.CopyFromSlice(len(sorted), func(i int) ([]any, error) { return copyRow(sorted[i]), nil })); err != nil {
		return nil, false, fmt.Errorf("copy attempts: %w", err)
	}
	if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
		return nil, false, fmt.Errorf("copy attempts: commit: %w", err)
	}
	committed = true
	s.copies.Add(1)
	results = make([]result, len(rows))
	for i := range results {
		results[i].inserted = true
	}
	return results, true, nil
}

// distinctPairs are the batch's distinct (context id, tenant) pairs.
func distinctPairs(rows []*pending) (ids, tenants []string) {
	seen := make(map[[2]string]bool, len(rows))
	for _, p := range rows {
		k := [2]string{p.attempt.ContextID, p.tenant}
		if !seen[k] {
			seen[k] = true
			ids, tenants = append(ids, k[0]), append(tenants, k[1])
		}
	}
	return ids, tenants
}

// copyRow is one attempt's values in writtenColumns' order.
func copyRow(p *pending) []any {
	a := p.attempt
	var decision any // NULL: no decision recorded
	if a.Decision != "" {
		decision = a.Decision
	}
	return []any{a.ContextID, p.tenant, int32(a.Attempt), a.At, a.Duration.Milliseconds(), a.FailureType,
		a.Retryable, a.Rule, int32(a.HTTPStatus), a.ErrorCode, a.Message, a.RecoveryAction, decision,
		a.Delay.Milliseconds(), a.Strategy, a.StopReason, a.Fallback, a.Provider, a.Model, a.ErrorName}
}
