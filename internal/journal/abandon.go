package journal

import (
	"context"
	"fmt"
	"time"
)

// DefaultAbandonAfter is how long a context may stay in progress with no
// activity before the sweeper (RunAbandoner) marks it abandoned. A retry
// context lasts seconds or minutes, and the clients retry finishing one for
// about a minute when policyd was away at its end, so an hour without a new
// attempt means the agent died or could not reach policyd again.
const DefaultAbandonAfter = time.Hour

// abandonEvery bounds how often the sweeper runs: a tenth of its idle time,
// between a second and a minute.
func abandonEvery(after time.Duration) time.Duration {
	return min(max(after/10, time.Second), time.Minute)
}

// AbandonIdle marks abandoned every context still in progress whose last
// activity (its start, or its latest attempt) is before idleSince, and
// returns how many it marked. Left in progress, such a context would be
// counted as running in the views long after its agent stopped. It works
// in batches like Prune, each its own short transaction that skips rows
// another replica's sweep holds, and stops between batches when ctx is
// done. A late FinishContext for a context marked so is refused as already
// finished, as for any other finished context.
func (s *Store) AbandonIdle(ctx context.Context, idleSince time.Time) (int64, error) {
	if idleSince.IsZero() {
		return 0, fmt.Errorf("abandon idle contexts: %w", invalid("idle_since", "is required"))
	}
	now := s.now()
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("abandon idle contexts: %w", err)
		}
		var n int64
		err := s.run(ctx, "abandon idle contexts", func(ctx context.Context) error {
			return s.pool.QueryRow(ctx, `
				WITH idle AS (
					UPDATE retry_contexts SET outcome = 'abandoned', finished_at = $3
					WHERE id IN (
						SELECT c.id FROM retry_contexts c
						WHERE c.outcome = 'in_progress' AND c.started_at < $1
						  AND NOT EXISTS (SELECT 1 FROM retry_attempts a WHERE a.context_id = c.id AND a.at >= $1)
						ORDER BY c.started_at
						LIMIT $2
						FOR UPDATE SKIP LOCKED)
					RETURNING id)
				SELECT count(*) FROM idle`, idleSince, s.cfg.pruneBatch, now).Scan(&n)
		})
		if err != nil {
			return total, err
		}
		total += n
		if n < int64(s.cfg.pruneBatch) {
			return total, nil
		}
	}
}

// RunAbandoner runs AbandonIdle until ctx is done, with idleSince after
// before the store's clock, every tenth of after (between a second and a
// minute); after ≤ 0 returns at once. A sweep that fails (the database is
// away) is logged and tried again at the next tick. Every replica may run
// one: the sweeps skip the rows another one holds.
func (s *Store) RunAbandoner(ctx context.Context, after time.Duration) {
	if after <= 0 {
		return
	}
	t := time.NewTicker(abandonEvery(after))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := s.AbandonIdle(ctx, s.cfg.now().Add(-after))
		switch {
		case err != nil && ctx.Err() == nil:
			s.cfg.logger.Debug("journal: marking idle contexts abandoned failed; trying again later", "error", err)
		case n > 0:
			s.cfg.logger.Info("journal: marked idle contexts abandoned", "contexts", n, "idle_for", after)
		}
	}
}
