package journal

import (
	"context"
	"fmt"
	"time"
)

// pruneStatementTimeout bounds one Prune statement. It is far longer than
// the store's timeout for ordinary calls: deleting 10,000 contexts with
// their attempts can take a while on a slow disk, and a slow prune is no
// sign that the database is down.
const pruneStatementTimeout = 5 * time.Minute

// Prune deletes the contexts that started before olderThan, with their
// attempts and reports, and the fleet events from before olderThan, and
// returns how many contexts it deleted. That
// includes contexts still in progress: a retry context is seconds or minutes
// long, so one still open after the retention age was left by an agent that
// died, and keeping it would let the journal grow without bound. It deletes in batches of 10,000 contexts, each its own short
// transaction so that pruning a large journal never holds locks for long,
// and stops between batches when ctx is done (returning what it deleted so
// far with ctx's error).
func (s *Store) Prune(ctx context.Context, olderThan time.Time) (int64, error) {
	if olderThan.IsZero() {
		return 0, fmt.Errorf("prune: %w", invalid("older_than", "is required"))
	}
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("prune: %w", err)
		}
		if !s.healthy.Load() {
			return total, s.errDown("prune")
		}
		stmtCtx, cancel := context.WithTimeout(ctx, pruneStatementTimeout)
		// Attempts have no foreign key (see migration 002), so the
		// statement deletes a context's attempts with it; error reports
		// go by their foreign key's cascade.
		var n int64
		err := s.pool.QueryRow(stmtCtx, `
			WITH doomed AS (
				DELETE FROM retry_contexts WHERE id IN (
					SELECT id FROM retry_contexts
					WHERE started_at < $1
					ORDER BY started_at
					LIMIT $2
					FOR UPDATE SKIP LOCKED)
				RETURNING id),
			attempts AS (DELETE FROM retry_attempts WHERE context_id IN (SELECT id FROM doomed))
			SELECT count(*) FROM doomed`, olderThan, s.cfg.pruneBatch).Scan(&n)
		err = translate(stmtCtx, "prune", err)
		cancel()
		s.observe(err)
		if err != nil {
			return total, err
		}
		total += n
		if n < int64(s.cfg.pruneBatch) {
			if err := s.pruneOrphans(ctx, olderThan); err != nil {
				return total, err
			}
			return total, s.pruneFleetEvents(ctx, olderThan)
		}
	}
}

// pruneOrphans deletes attempts from before olderThan whose context is
// gone: an attempt recorded while Prune deleted its context (there is no
// foreign key to stop it) would otherwise stay forever. Every context of an
// attempt that old was itself started before olderThan, so it was pruned.
func (s *Store) pruneOrphans(ctx context.Context, olderThan time.Time) error {
	stmtCtx, cancel := context.WithTimeout(ctx, pruneStatementTimeout)
	defer cancel()
	_, err := s.pool.Exec(stmtCtx, `
		DELETE FROM retry_attempts a
		WHERE a.at < $1 AND NOT EXISTS (SELECT 1 FROM retry_contexts c WHERE c.id = a.context_id)`, olderThan)
	err = translate(stmtCtx, "prune orphaned attempts", err)
	s.observe(err)
	return err
}

// pruneFleetEvents deletes the fleet events from before olderThan, in
// batches of pruneBatch like the contexts, so that each statement is a
// short transaction.
func (s *Store) pruneFleetEvents(ctx context.Context, olderThan time.Time) error {
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("prune fleet events: %w", err)
		}
		if !s.healthy.Load() {
			return s.errDown("prune fleet events")
		}
		stmtCtx, cancel := context.WithTimeout(ctx, pruneStatementTimeout)
		tag, err := s.pool.Exec(stmtCtx, `
			DELETE FROM fleet_events WHERE id IN (
				SELECT id FROM fleet_events WHERE at < $1 ORDER BY at LIMIT $2 FOR UPDATE SKIP LOCKED)`,
			olderThan, s.cfg.pruneBatch)
		err = translate(stmtCtx, "prune fleet events", err)
		cancel()
		s.observe(err)
		if err != nil {
			return err
		}
		if tag.RowsAffected() < int64(s.cfg.pruneBatch) {
			return nil
		}
	}
}
