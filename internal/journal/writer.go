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
	known := make(knownContexts)
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
		s.flush(batch, known)
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

// knownContexts are contexts one writer has seen committed, by id, with
// their tenant: a batch need not ask PostgreSQL to begin them again. Every
// attempt of a context goes through the same writer, so each writer keeps
// its own set, without a lock. It is only a hint: the attempt's insert
// still checks that the context exists for the tenant.
type knownContexts map[string]string

// maxKnownContexts bounds a writer's knownContexts (about 150 bytes each
// with the map's overhead); when full the set starts again empty, which
// costs one redundant "begin" per context still in use. Contexts live
// seconds to minutes, so a few thousand cover the ones in use on a busy
// daemon; a larger set only raised the daemon's memory (the garbage
// collector's target grows with the live heap).
const maxKnownContexts = 4096

// learn adds the contexts of the rows that were written (a row that found
// its id under another tenant teaches nothing).
func (k knownContexts) learn(rows []*pending, results []result) {
	if len(k)+len(rows) > maxKnownContexts {
		clear(k)
	}
	for i, p := range rows {
		if results[i].err == nil {
			k[p.ensure.ID] = p.tenant
		}
	}
}

// flush writes a batch and answers every caller in it.
func (s *Store) flush(batch []*pending, known knownContexts) {
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
	start := time.Now()
	results, err := s.writeBatch(live, known)
	if err != nil && errors.Is(err, ErrInvalid) && len(live) > 1 {
		// A row the checks before queueing let through but PostgreSQL
		// refused: write each alone so that it cannot fail its neighbours.
		for _, p := range live {
			s.flush([]*pending{p}, known) // each reports itself to the observer
		}
		return
	}
	s.cfg.observer.BatchCommitted(len(live), time.Since(start), err)
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
// result per pending call, in order. Contexts in known are not begun again;
// should one be gone (pruned), its attempts are written once more with
// their contexts, as Record promises.
func (s *Store) writeBatch(batch []*pending, known knownContexts) ([]result, error) {
	// One row per distinct attempt (the first call wins; later ones find it
	// there) and per distinct context to ensure.
	var (
		rows    []*pending
		rowOf   = make([]int, len(batch))
		seenRow = make(map[attemptKey]int, len(batch))
		ensure  []Context
		seenCtx = make(map[string]bool, len(batch))
		skipped = false
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
		if seenCtx[p.ensure.ID] {
			continue
		}
		seenCtx[p.ensure.ID] = true
		if tenant, ok := known[p.ensure.ID]; ok && tenant == p.tenant {
			skipped = true
			continue
		}
		ensure = append(ensure, p.ensure)
	}
	// Lock rows in one order in every transaction, so that two writers
	// (two replicas) cannot deadlock on each other.
	slices.SortFunc(ensure, func(a, b Context) int { return strings.Compare(a.ID, b.ID) })

	rowResults, err := s.writeRowsRetrying(rows, ensure)
	if err == nil && skipped {
		rowResults, err = s.rewriteForgotten(rows, rowResults, known)
	}
	if err != nil {
		s.observe(err)
		return nil, err
	}
	known.learn(rows, rowResults)

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

// writeRowsRetrying is writeRows under the store's timeout, on the fast
// path first and again skipping repeats when the batch held one, and tried
// again (at most three times) when it lost a deadlock or serialization race.
func (s *Store) writeRowsRetrying(rows []*pending, ensure []Context) ([]result, error) {
	again := false
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeoutCause(context.Background(), s.cfg.timeout, errOpTimeout)
		results, err := s.write(ctx, rows, ensure, again)
		if err != nil && !again && isUniqueViolation(err) {
			// An attempt recorded before: the batch rolled back whole;
			// write it again, skipping repeats. Not a try.
			cancel()
			again, try = true, try-1
			continue
		}
		retry := err != nil && isRetryableConflict(err) && try < 3
		err = translate(ctx, "write batch", err)
		cancel()
		if !retry {
			return results, err
		}
	}
}

// write writes the rows with COPY when there are enough of them for it to
// pay (WithCopyMinRows) and none is known to be a repeat, else with
// writeRows' single statement.
func (s *Store) write(ctx context.Context, rows []*pending, ensure []Context, again bool) ([]result, error) {
	if !again && s.cfg.copyMinRows > 0 && len(rows) >= s.cfg.copyMinRows {
		results, ok, err := s.writeRowsCopy(ctx, rows, ensure)
		if ok || err != nil {
			return results, err
		}
	}
	return s.writeRows(ctx, rows, ensure, again)
}

// rewriteForgotten writes again, this time beginning their contexts, the
// rows that found no context although known said it existed (it was pruned
// since), and forgets those contexts.
func (s *Store) rewriteForgotten(rows []*pending, results []result, known knownContexts) ([]result, error) {
	var (
		again   []*pending
		at      []int
		ensure  []Context
		seenCtx = map[string]bool{}
	)
	for i, p := range rows {
		if tenant, ok := known[p.ensure.ID]; !ok || tenant != p.tenant || !errors.Is(results[i].err, ErrNotFound) {
			continue
		}
		again, at = append(again, p), append(at, i)
		if !seenCtx[p.ensure.ID] {
			seenCtx[p.ensure.ID] = true
			delete(known, p.ensure.ID)
			ensure = append(ensure, p.ensure)
		}
	}
	if len(again) == 0 {
		return results, nil
	}
	slices.SortFunc(ensure, func(a, b Context) int { return strings.Compare(a.ID, b.ID) })
	retried, err := s.writeRowsRetrying(again, ensure)
	if err != nil {
		return nil, err
	}
	for j, i := range at {
		results[i] = retried[j]
	}
	return results, nil
}

// The writer's statements. A batch is one statement, so one round trip and
// one commit: PostgreSQL runs a lone statement as its own transaction.
//
// Contexts not known to the writer are begun in a data-modifying CTE (ens)
// of the attempts' INSERT. The attempts' statement cannot see the rows its
// CTE inserts (one snapshot for the whole statement), so it takes an
// attempt's tenant from retry_contexts, else from ens, through two
// correlated primary-key lookups. A form with "OR EXISTS (SELECT ... FROM
// ens)" was planned as a hashed subplan that read the whole contexts table
// on every batch on a young table. The writers' connections run with
// sequential scans off and generic plans (Open), so a plan made while the
// table was small stays an index plan.
//
// Contexts are begun in the order given and attempts inserted in (context,
// attempt) order (writeBatch and writeRows sort them), so that two writers
// (two replicas) lock rows in one order and cannot deadlock.
var (
	// insertAttemptsSQL inserts each attempt whose context belongs to its
	// tenant. It is the fast path: an attempt already recorded fails the
	// whole statement with a unique violation, and the batch is written
	// again with insertAttemptsAgainSQL. Checking for conflicts row by row
	// (ON CONFLICT) and returning the rows inserted cost a third of the
	// insert, for a case that only a client recording an attempt again meets.
	insertAttemptsSQL = insertAttempts(1) + `
		WHERE EXISTS (SELECT 1 FROM retry_contexts c WHERE c.id = i.context_id AND c.tenant = i.tenant)`

	// insertAttemptsAgainSQL is insertAttemptsSQL for a batch that holds an
	// attempt already recorded: it skips those and returns the attempts it
	// inserted.
	insertAttemptsAgainSQL = insertAttemptsSQL + onConflictReturning

	// ensureAndInsertSQL is insertAttemptsSQL beginning the contexts in
	// $1..$9 first (ON CONFLICT DO NOTHING: a context that exists is left as
	// it is).
	ensureAndInsertSQL = `
		WITH ens AS (` + ensureContextsSQL + `
			RETURNING id, tenant)` + insertAttempts(10) + `
		WHERE coalesce((SELECT c.tenant FROM retry_contexts c WHERE c.id = i.context_id),
		               (SELECT e.tenant FROM ens e WHERE e.id = i.context_id)) = i.tenant`

	// ensureAndInsertAgainSQL is ensureAndInsertSQL skipping the attempts
	// already recorded, returning those it inserted.
	ensureAndInsertAgainSQL = ensureAndInsertSQL + onConflictReturning
)

const (
	// ensureContextsSQL begins the contexts in $1..$9 that do not exist yet.
	ensureContextsSQL = `
		INSERT INTO retry_contexts (id, tenant, agent, provider, model, operation, profile, labels, started_at)
		SELECT id, tenant, agent, provider, model, operation, profile, labels::jsonb, started_at
		FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
		            $8::text[], $9::timestamptz[])
		     AS t(id, tenant, agent, provider, model, operation, profile, labels, started_at)
		ON CONFLICT (id) DO NOTHING`

	onConflictReturning = `
		ON CONFLICT (context_id, attempt) DO NOTHING
		RETURNING context_id::text, attempt`

	// knownContextsSQL returns the positions (1-based) of the pairs whose
	// context exists for the tenant.
	knownContextsSQL = `
		SELECT i.idx FROM unnest($1::uuid[], $2::text[]) WITH ORDINALITY AS i(id, tenant, idx)
		WHERE EXISTS (SELECT 1 FROM retry_contexts c WHERE c.id = i.id AND c.tenant = i.tenant)`
)

// writtenColumns are the retry_attempts columns the writers fill, with
// their types, in the order of attemptArgs' arrays and copyRow's values.
var writtenColumns = []struct{ name, typ string }{
	{"context_id", "uuid"}, {"tenant", "text"}, {"attempt", "int"}, {"at", "timestamptz"},
	{"duration_ms", "bigint"}, {"failure_type", "text"}, {"retryable", "bool"}, {"rule", "text"},
	{"http_status", "int"}, {"error_code", "text"}, {"message", "text"}, {"recovery_action", "text"},
	{"decision", "text"}, {"delay_ms", "bigint"}, {"strategy", "text"}, {"stop_reason", "text"},
	{"fallback", "text"}, {"provider", "text"}, {"model", "text"}, {"error_name", "text"},
}

// writtenColumnNames are writtenColumns' names.
func writtenColumnNames() []string {
	names := make([]string, len(writtenColumns))
	for i, c := range writtenColumns {
		names[i] = c.name
	}
	return names
}

// insertAttempts is the attempts' INSERT ... SELECT from the arrays of
// writtenColumns starting at parameter $first, without its WHERE. An empty
// decision is stored as NULL (no decision recorded).
func insertAttempts(first int) string {
	params, values := make([]string, len(writtenColumns)), make([]string, len(writtenColumns))
	for i, c := range writtenColumns {
		params[i] = fmt.Sprintf("$%d::%s[]", first+i, c.typ)
		values[i] = "i." + c.name
		if c.name == "decision" {
			values[i] = "nullif(i.decision, '')"
		}
	}
	names := strings.Join(writtenColumnNames(), ", ")
	return `
		INSERT INTO retry_attempts (` + names + `)
		SELECT ` + strings.Join(values, ", ") + `
		FROM unnest(` + strings.Join(params, ", ") + `) AS i(` + names + `)`
}

// insertedKey identifies an attempt the database reported inserted.
type insertedKey struct {
	contextID string
	attempt   int32
}

// writeRows is the transaction: ensure the contexts and insert the attempts
// whose context belongs to their tenant, in one statement that commits
// before it answers. again selects the ...AgainSQL statements (see
// insertAttemptsSQL). Only a batch in which some attempt was not inserted
// (rare: another tenant's context, a repeat, or a context another writer
// began at the same moment) costs more statements. A batch that meets an
// attempt already recorded without again fails with a unique violation
// (isUniqueViolation).
func (s *Store) writeRows(ctx context.Context, rows []*pending, ensure []Context, again bool) ([]result, error) {
	n, m := len(ensure), len(rows)
	args := attemptArgs(rows)
	if n > 0 {
		args = append(contextArgs(ensure), args...)
	}
	var sql string
	switch {
	case n > 0 && again:
		sql = ensureAndInsertAgainSQL
	case n > 0:
		sql = ensureAndInsertSQL
	case again:
		sql = insertAttemptsAgainSQL
	default:
		sql = insertAttemptsSQL
	}
	// One statement outside a transaction block commits before its answer
	// comes back, so no caller is answered before the commit.
	// inserted is nil when every attempt that found its context was
	// inserted (the fast path: it fails on any repeat).
	var inserted map[insertedKey]bool
	allKnown := true
	if !again {
		tag, err := s.writePool.Exec(ctx, sql, args...)
		if err != nil {
			return nil, fmt.Errorf("insert attempts: %w", err)
		}
		allKnown = tag.RowsAffected() == int64(m)
	} else {
		var err error
		if inserted, err = s.insertReturning(ctx, sql, args); err != nil {
			return nil, err
		}
	}

	results := make([]result, m)
	var missing []int // rows not inserted: repeats, or another tenant's context
	for i, p := range rows {
		if inserted == nil || inserted[insertedKey{p.attempt.ContextID, int32(p.attempt.Attempt)}] {
			results[i].inserted = true
		} else {
			missing = append(missing, i)
		}
	}
	if inserted == nil && !allKnown {
		// Some attempt found no context of its tenant; the others were
		// inserted. Which is which, the check below says.
		missing = missing[:0]
		for i := range rows {
			missing = append(missing, i)
		}
	}
	if len(missing) == 0 {
		return results, nil
	}
	ids, tenants := make([]string, len(missing)), make([]string, len(missing))
	for j, i := range missing {
		ids[j], tenants[j] = rows[i].attempt.ContextID, rows[i].tenant
	}
	krows, err := s.writePool.Query(ctx, knownContextsSQL, ids, tenants)
	if err != nil {
		return nil, fmt.Errorf("check contexts: %w", err)
	}
	known, err := pgx.CollectRows(krows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("check contexts: %w", err)
	}
	isKnown := make([]bool, len(missing))
	var retry []*pending
	for _, idx := range known {
		if idx >= 1 && int(idx) <= len(missing) {
			isKnown[idx-1] = true
			retry = append(retry, rows[missing[idx-1]])
		}
	}
	// An attempt whose context exists may still have been left out: when
	// another writer (another replica) began the same context concurrently,
	// the CTE's ON CONFLICT waited for its commit, but the statement's
	// snapshot predates that row. Insert those attempts again, skipping
	// the ones that are there: rows already inserted by this batch (fast
	// path) or recorded before (again).
	var retried map[insertedKey]bool
	if len(retry) > 0 {
		if retried, err = s.insertReturning(ctx, insertAttemptsAgainSQL, attemptArgs(retry)); err != nil {
			return nil, err
		}
	}
	for j, i := range missing {
		k := insertedKey{rows[i].attempt.ContextID, int32(rows[i].attempt.Attempt)}
		switch {
		case !isKnown[j]:
			results[i] = result{err: fmt.Errorf("context %s: %w", ids[j], ErrNotFound)}
		case retried[k]:
			results[i].inserted = true
		default:
			// Not inserted now: the fast path inserted it (it would have
			// failed on a repeat), or, written again, it was a repeat.
			results[i].inserted = inserted == nil
		}
	}
	return results, nil
}

// insertReturning runs one of the ...AgainSQL statements and returns the
// attempts it inserted.
func (s *Store) insertReturning(ctx context.Context, sql string, args []any) (map[insertedKey]bool, error) {
	qrows, err := s.writePool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("insert attempts: %w", err)
	}
	defer qrows.Close()
	inserted := make(map[insertedKey]bool)
	for qrows.Next() {
		var k insertedKey
		if err := qrows.Scan(&k.contextID, &k.attempt); err != nil {
			return nil, fmt.Errorf("insert attempts: %w", err)
		}
		inserted[k] = true
	}
	if err := qrows.Err(); err != nil {
		return nil, fmt.Errorf("insert attempts: %w", err)
	}
	return inserted, nil
}

// contextArgs are the 9 arrays of ensureAndInsertSQL's contexts.
func contextArgs(ensure []Context) []any {
	n := len(ensure)
	var (
		cID, cTenant, cAgent, cProvider, cModel, cOperation, cProfile, cLabels = make([]string, n),
			make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n),
			make([]string, n), make([]string, n)
		cStarted = make([]time.Time, n)
	)
	for i, c := range ensure {
		cID[i], cTenant[i], cAgent[i], cProvider[i], cModel[i] = c.ID, c.Tenant, c.Agent, c.Provider, c.Model
		cOperation[i], cProfile[i], cLabels[i], cStarted[i] = c.Operation, c.Profile, labelsJSON(c.Labels), c.StartedAt
	}
	return []any{cID, cTenant, cAgent, cProvider, cModel, cOperation, cProfile, cLabels, cStarted}
}

// attemptArgs are the arrays of the attempts' INSERT (writtenColumns), in (context,
// attempt) order, so that two writers (two replicas) inserting the same
// attempts lock index entries in one order.
func attemptArgs(rows []*pending) []any {
	m := len(rows)
	var (
		aID, aTenant, aFailureType, aRule, aErrorCode, aMessage, aRecovery, aDecision = make([]string, m),
			make([]string, m), make([]string, m), make([]string, m), make([]string, m), make([]string, m),
			make([]string, m), make([]string, m)
		aStrategy, aStopReason, aFallback, aProvider, aModel, aErrorName = make([]string, m), make([]string, m),
			make([]string, m), make([]string, m), make([]string, m), make([]string, m)
		aAttempt, aStatus     = make([]int32, m), make([]int32, m)
		aAt                   = make([]time.Time, m)
		aDurationMS, aDelayMS = make([]int64, m), make([]int64, m)
		aRetryable            = make([]bool, m)
	)
	for i, p := range inAttemptOrder(rows) {
		a := p.attempt
		aID[i], aTenant[i], aAttempt[i], aAt[i] = a.ContextID, p.tenant, int32(a.Attempt), a.At
		aDurationMS[i], aFailureType[i], aRetryable[i], aRule[i] = a.Duration.Milliseconds(), a.FailureType, a.Retryable, a.Rule
		aStatus[i], aErrorCode[i], aMessage[i], aRecovery[i] = int32(a.HTTPStatus), a.ErrorCode, a.Message, a.RecoveryAction
		aDecision[i], aDelayMS[i], aStrategy[i], aStopReason[i] = a.Decision, a.Delay.Milliseconds(), a.Strategy, a.StopReason
		aFallback[i], aProvider[i], aModel[i], aErrorName[i] = a.Fallback, a.Provider, a.Model, a.ErrorName
	}
	return []any{aID, aTenant, aAttempt, aAt, aDurationMS, aFailureType, aRetryable, aRule, aStatus,
		aErrorCode, aMessage, aRecovery, aDecision, aDelayMS, aStrategy, aStopReason, aFallback, aProvider, aModel,
		aErrorName}
}

// inAttemptOrder returns the rows sorted by (context, attempt).
func inAttemptOrder(rows []*pending) []*pending {
	sorted := slices.Clone(rows)
	slices.SortFunc(sorted, func(x, y *pending) int {
		if c := strings.Compare(x.attempt.ContextID, y.attempt.ContextID); c != 0 {
			return c
		}
		return x.attempt.Attempt - y.attempt.Attempt
	})
	return sorted
}
