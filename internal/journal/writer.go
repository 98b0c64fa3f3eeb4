package journal

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// pending is one Record call waiting for the writer.
type pending struct {
	ctx     context.Context
	tenant  string
	attempt Attempt
	ensure  Context
	queued  time.Time
	done    chan result // buffered: the writer never blocks on a caller that left
}

type result struct {
	inserted bool
	err      error
}

// writeLoop is the batching writer: it takes the first waiting call and
// gathers more until the batch window (counted from when the first was
// queued) has passed or the batch is as large as the previous one (at most
// maxBatch), then writes them in one transaction. While a batch is being
// committed the next one queues up, so under load batches grow by
// themselves and many callers share a commit.
//
// Stopping at the previous batch's size matters for callers that record
// again as soon as they are answered (a busy agent, a benchmark): they all
// come back within a fraction of the window, and waiting out the rest of it
// would leave the database idle.
func (s *Store) writeLoop(queue chan *pending) {
	defer s.writers.Done()
	batch := make([]*pending, 0, s.cfg.maxBatch)
	target := s.cfg.maxBatch
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for first := range queue {
		batch = append(batch[:0], first)
		open := true
		if wait := s.cfg.batchWindow - time.Since(first.queued); wait > 0 && len(batch) < target {
			timer.Reset(wait)
		gather:
			for len(batch) < target {
				select {
				case p, ok := <-queue:
					if !ok {
						open = false
						break gather
					}
					batch = append(batch, p)
				case <-timer.C:
					break gather
				}
			}
			timer.Stop()
		}
		// Whatever is already queued joins too, up to maxBatch: waiting is
		// over, but taking it costs nothing.
	drain:
		for open && len(batch) < s.cfg.maxBatch {
			select {
			case p, ok := <-queue:
				if !ok {
					break drain
				}
				batch = append(batch, p)
			default:
				break drain
			}
		}
		target = max(len(batch), 2)
		s.flush(batch)
		clear(batch)
	}
}

// queueOf is the queue of the writer that writes context id's attempts.
// Every attempt of a context goes through the same writer, so that two of
// the store's own transactions never wait on each other's row locks.
func (s *Store) queueOf(id string) chan *pending {
	h := fnv.New32a()
	h.Write([]byte(id))
	return s.queues[h.Sum32()%uint32(len(s.queues))]
}

// flush writes a batch and answers every caller in it.
func (s *Store) flush(batch []*pending) {
	live := batch[:0:0]
	for _, p := range batch {
		if p.ctx.Err() == nil { // a caller that left has its answer already
			live = append(live, p)
		}
	}
	if len(live) == 0 {
		return
	}
	if !s.healthy.Load() {
		err := s.errDown("write batch")
		for _, p := range live {
			p.done <- result{err: err}
		}
		return
	}
	results, err := s.writeBatch(live)
	if err != nil && errors.Is(err, ErrInvalid) && len(live) > 1 {
		// A row the checks before queueing let through but PostgreSQL
		// refused: write each alone so that it cannot fail its neighbours.
		for _, p := range live {
			s.flush([]*pending{p})
		}
		return
	}
	if err != nil {
		s.cfg.logger.Warn("journal: writing a batch of attempts failed", "attempts", len(live), "error", err)
		for _, p := range live {
			p.done <- result{err: err}
		}
		return
	}
	for i, p := range live {
		p.done <- results[i]
	}
}

// attemptKey identifies an attempt within a batch.
type attemptKey struct {
	tenant, contextID string
	attempt           int
}

// writeBatch writes the batch's contexts and attempts in one transaction
// (retrying it when it lost a deadlock to another writer) and returns one
// result per pending call, in order.
func (s *Store) writeBatch(batch []*pending) ([]result, error) {
	// One row per distinct attempt (the first call wins; later ones find it
	// there) and per distinct context to ensure.
	var (
		rows    []*pending
		rowOf   = make([]int, len(batch))
		seenRow = make(map[attemptKey]int, len(batch))
		ensure  []Context
		seenCtx = make(map[string]bool, len(batch))
	)
	for i, p := range batch {
		k := attemptKey{p.tenant, p.attempt.ContextID, p.attempt.Attempt}
		j, ok := seenRow[k]
		if !ok {
			j = len(rows)
			seenRow[k] = j
			rows = append(rows, p)
		}
		rowOf[i] = j
		if !seenCtx[p.ensure.ID] {
			seenCtx[p.ensure.ID] = true
			ensure = append(ensure, p.ensure)
		}
	}
	// Lock rows in one order in every transaction, so that two writers
	// (two replicas) cannot deadlock on each other.
	slices.SortFunc(ensure, func(a, b Context) int { return strings.Compare(a.ID, b.ID) })

	var (
		rowResults []result
		err        error
	)
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeoutCause(context.Background(), s.cfg.timeout, errOpTimeout)
		rowResults, err = s.writeRows(ctx, rows, ensure)
		retry := err != nil && isRetryableConflict(err) && try < 3
		err = translate(ctx, "write batch", err)
		cancel()
		if !retry {
			break
		}
	}
	if err != nil {
		s.observe(err)
		return nil, err
	}
	results := make([]result, len(batch))
	answered := make([]bool, len(rows))
	for i := range batch {
		r := rowResults[rowOf[i]]
		if answered[rowOf[i]] {
			r.inserted = false // a repeat within the batch finds the first call's row
		}
		answered[rowOf[i]] = true
		results[i] = r
	}
	return results, nil
}

// writeRows is the transaction: ensure the contexts, insert the attempts
// whose context belongs to their tenant, and bring the contexts' totals up
// to date, in one round trip (a pgx.Batch) plus begin and commit.
func (s *Store) writeRows(ctx context.Context, rows []*pending, ensure []Context) ([]result, error) {
	var (
		n = len(ensure)

		cID, cTenant, cAgent, cProvider, cModel, cOperation, cProfile, cLabels = make([]string, n),
			make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n),
			make([]string, n), make([]string, n)
		cStarted = make([]time.Time, n)
	)
	for i, c := range ensure {
		cID[i], cTenant[i], cAgent[i], cProvider[i], cModel[i] = c.ID, c.Tenant, c.Agent, c.Provider, c.Model
		cOperation[i], cProfile[i], cLabels[i], cStarted[i] = c.Operation, c.Profile, labelsJSON(c.Labels), c.StartedAt
	}

	m := len(rows)
	var (
		aID, aTenant, aFailureType, aRule, aErrorCode, aMessage, aRecovery, aDecision = make([]string, m),
			make([]string, m), make([]string, m), make([]string, m), make([]string, m), make([]string, m),
			make([]string, m), make([]string, m)
		aStrategy, aStopReason, aFallback, aProvider, aModel = make([]string, m), make([]string, m),
			make([]string, m), make([]string, m), make([]string, m)
		aAttempt, aStatus     = make([]int32, m), make([]int32, m)
		aAt                   = make([]time.Time, m)
		aDurationMS, aDelayMS = make([]int64, m), make([]int64, m)
		aRetryable            = make([]bool, m)
	)
	for i, p := range rows {
		a := p.attempt
		aID[i], aTenant[i], aAttempt[i], aAt[i] = a.ContextID, p.tenant, int32(a.Attempt), a.At
		aDurationMS[i], aFailureType[i], aRetryable[i], aRule[i] = a.Duration.Milliseconds(), a.FailureType, a.Retryable, a.Rule
		aStatus[i], aErrorCode[i], aMessage[i], aRecovery[i] = int32(a.HTTPStatus), a.ErrorCode, a.Message, a.RecoveryAction
		aDecision[i], aDelayMS[i], aStrategy[i], aStopReason[i] = a.Decision, a.Delay.Milliseconds(), a.Strategy, a.StopReason
		aFallback[i], aProvider[i], aModel[i] = a.Fallback, a.Provider, a.Model
	}

	results := make([]result, m)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		// Every lookup here is by primary key. On a young table (few pages,
		// no statistics yet) the planner prefers sequential scans, for the
		// batch's own probes and for the foreign-key check of each inserted
		// attempt, and caches those plans per connection: every commit then
		// read the whole table, slower as the journal grew. With sequential
		// scans off for this transaction only, the plans use the indexes.
		b.Queue(`SET LOCAL enable_seqscan = off`)
		b.Queue(`
			INSERT INTO retry_contexts (id, tenant, agent, provider, model, operation, profile, labels, started_at)
			SELECT id::uuid, tenant, agent, provider, model, operation, profile, labels::jsonb, started_at
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
			            $8::text[], $9::timestamptz[])
			     AS t(id, tenant, agent, provider, model, operation, profile, labels, started_at)
			ORDER BY id
			ON CONFLICT (id) DO NOTHING`,
			cID, cTenant, cAgent, cProvider, cModel, cOperation, cProfile, cLabels, cStarted)
		b.Queue(`
			WITH input AS (
				SELECT t.*
				FROM unnest($1::text[], $2::text[], $3::int[], $4::timestamptz[], $5::bigint[], $6::text[],
				            $7::bool[], $8::text[], $9::int[], $10::text[], $11::text[], $12::text[], $13::text[],
				            $14::bigint[], $15::text[], $16::text[], $17::text[], $18::text[], $19::text[])
				     WITH ORDINALITY
				     AS t(context_id, tenant, attempt, at, duration_ms, failure_type, retryable, rule,
				          http_status, error_code, message, recovery_action, decision, delay_ms, strategy,
				          stop_reason, fallback, provider, model, idx)
			),
			ins AS (
				INSERT INTO retry_attempts (context_id, attempt, at, duration_ms, failure_type, retryable, rule,
					http_status, error_code, message, recovery_action, decision, delay_ms, strategy, stop_reason,
					fallback, provider, model)
				SELECT i.context_id::uuid, i.attempt, i.at, i.duration_ms, i.failure_type, i.retryable, i.rule,
					i.http_status, i.error_code, i.message, i.recovery_action, nullif(i.decision, ''), i.delay_ms,
					i.strategy, i.stop_reason, i.fallback, i.provider, i.model
				FROM input i
				JOIN retry_contexts c ON c.id = i.context_id::uuid AND c.tenant = i.tenant
				ORDER BY i.context_id, i.attempt
				ON CONFLICT (context_id, attempt) DO NOTHING
				RETURNING context_id, attempt, delay_ms
			),
			totals AS (
				UPDATE retry_contexts c
				SET attempt_count = greatest(c.attempt_count, s.max_attempt),
				    total_wait_ms = c.total_wait_ms + s.wait_ms
				FROM (SELECT context_id, max(attempt) AS max_attempt, sum(delay_ms)::bigint AS wait_ms
				      FROM ins GROUP BY context_id) s
				WHERE c.id = s.context_id
			)
			SELECT i.idx,
			       ins.context_id IS NOT NULL AND k.known AS inserted,
			       k.known
			FROM input i
			LEFT JOIN ins ON ins.context_id = i.context_id::uuid AND ins.attempt = i.attempt
			-- A per-row EXISTS probes the primary key; a join here let the
			-- planner hash-join a sequential scan of every context into each
			-- batch, which made each commit slower as the journal grew.
			CROSS JOIN LATERAL (SELECT EXISTS (SELECT 1 FROM retry_contexts c
			                                   WHERE c.id = i.context_id::uuid AND c.tenant = i.tenant) AS known) k`,
			aID, aTenant, aAttempt, aAt, aDurationMS, aFailureType, aRetryable, aRule, aStatus, aErrorCode,
			aMessage, aRecovery, aDecision, aDelayMS, aStrategy, aStopReason, aFallback, aProvider, aModel)
		br := tx.SendBatch(ctx, b)
		if _, err := br.Exec(); err != nil {
			br.Close()
			return fmt.Errorf("set plan options: %w", err)
		}
		if _, err := br.Exec(); err != nil {
			br.Close()
			return fmt.Errorf("ensure contexts: %w", err)
		}
		qrows, err := br.Query()
		if err != nil {
			br.Close()
			return fmt.Errorf("insert attempts: %w", err)
		}
		seen := 0
		for qrows.Next() {
			var (
				idx             int64
				inserted, known bool
			)
			if err := qrows.Scan(&idx, &inserted, &known); err != nil {
				qrows.Close()
				br.Close()
				return fmt.Errorf("insert attempts: %w", err)
			}
			if idx < 1 || int(idx) > m {
				qrows.Close()
				br.Close()
				return fmt.Errorf("insert attempts: row index %d out of range", idx)
			}
			r := result{inserted: inserted}
			if !known {
				r.err = fmt.Errorf("context %s: %w", aID[idx-1], ErrNotFound)
			}
			results[idx-1] = r
			seen++
		}
		qrows.Close()
		if err := qrows.Err(); err != nil {
			br.Close()
			return fmt.Errorf("insert attempts: %w", err)
		}
		if err := br.Close(); err != nil {
			return err
		}
		if seen != m {
			return fmt.Errorf("insert attempts: %d results for %d rows", seen, m)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return results, nil
}
