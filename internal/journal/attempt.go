package journal

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The decisions an attempt can record, as stored in retry_attempts.decision.
const (
	// DecisionNone is an attempt recorded without a decision (stored NULL).
	DecisionNone = ""
	// DecisionRetry is a retry after Attempt.Delay.
	DecisionRetry = "retry"
	// DecisionStop is giving up; Attempt.StopReason says why.
	DecisionStop = "stop"
	// DecisionFallBack is trying something else; Attempt.Fallback says what.
	DecisionFallBack = "fall_back"
)

// MaxAttempt is the highest attempt number the journal accepts (the schema
// checks it too): far beyond any retry budget, and it bounds a context's
// history, and so an error report and a GetContext answer.
const MaxAttempt = 1000

// maxDelay bounds Duration and Delay so that a context's total wait cannot
// overflow; a year is beyond any retry delay or attempt.
const maxDelay = 365 * 24 * time.Hour

// Attempt is one failed attempt of a context, as classified, and the
// decision taken after it.
type Attempt struct {
	// ContextID is the context's UUID; Attempt the 1-based attempt number,
	// at most MaxAttempt. Together they identify the attempt: recording the
	// same pair again changes nothing.
	ContextID string
	Attempt   int
	// At is when the attempt failed; defaults to the store's clock.
	At time.Time
	// Duration is how long the attempt ran (0 when unknown).
	Duration time.Duration
	// FailureType is the classification's type, e.g. "RATE_LIMIT"; stored
	// upper-case without a "FAILURE_TYPE_" prefix, so that views group one
	// spelling.
	FailureType string
	Retryable   bool
	// Rule is the classifier rule that matched.
	Rule string
	// HTTPStatus is 0 when there was no HTTP response, else 100..999.
	HTTPStatus int
	// ErrorName is the failure's error class, e.g. "TypeError"; ErrorCode
	// its machine code. Both are cut to 256 characters.
	ErrorName, ErrorCode string
	// Message is the failure's message, cut to 1024 characters.
	Message string
	// RecoveryAction is the classification's advice; the error report of a
	// failed context uses the last attempt's.
	RecoveryAction string
	// Decision is DecisionNone, DecisionRetry, DecisionStop or
	// DecisionFallBack. Delay is the wait decided before the next attempt
	// (millisecond precision); the context's TotalWait is their sum.
	Decision string
	Delay    time.Duration
	// Strategy describes the strategy that decided; StopReason why it
	// stopped; Fallback what it fell back to.
	Strategy, StopReason, Fallback string
	// Provider and Model are the ones this attempt used (they change on
	// fallback); empty means the context's.
	Provider, Model string
}

// normalizeFailureType turns "FAILURE_TYPE_RATE_LIMIT" and "rate_limit"
// into "RATE_LIMIT". The server already stores internal/enums' short names;
// this keeps the journal, which knows nothing of the API's generated code,
// tolerant of a caller that writes the full one.
func normalizeFailureType(t string) string {
	t = strings.ToUpper(strings.TrimSpace(t))
	return strings.TrimPrefix(t, "FAILURE_TYPE_")
}

// normalizeAttempt checks a and makes it storable: a canonical context id,
// times in microseconds, durations in milliseconds, texts clipped.
func (s *Store) normalizeAttempt(a Attempt) (Attempt, error) {
	id, err := normalizeID("context_id", a.ContextID)
	if err != nil {
		return Attempt{}, err
	}
	a.ContextID = id
	if a.Attempt < 1 || a.Attempt > MaxAttempt {
		return Attempt{}, invalid("attempt", "must be 1..%d, got %d", MaxAttempt, a.Attempt)
	}
	if a.HTTPStatus != 0 && (a.HTTPStatus < 100 || a.HTTPStatus > 999) {
		return Attempt{}, invalid("http_status", "must be 0 or 100..999, got %d", a.HTTPStatus)
	}
	if a.Duration < 0 || a.Duration > maxDelay {
		return Attempt{}, invalid("duration", "must be 0..%s, got %s", maxDelay, a.Duration)
	}
	if a.Delay < 0 || a.Delay > maxDelay {
		return Attempt{}, invalid("delay", "must be 0..%s, got %s", maxDelay, a.Delay)
	}
	switch a.Decision {
	case DecisionNone, DecisionRetry, DecisionStop, DecisionFallBack:
	default:
		return Attempt{}, invalid("decision", "must be empty, %q, %q or %q, got %q",
			DecisionRetry, DecisionStop, DecisionFallBack, clip(a.Decision, 64))
	}
	if a.At.IsZero() {
		a.At = s.cfg.now()
	}
	a.At = dbTime(a.At)
	a.Duration = a.Duration.Truncate(time.Millisecond)
	a.Delay = a.Delay.Truncate(time.Millisecond)
	a.FailureType = clip(normalizeFailureType(a.FailureType), maxNameLen)
	a.Rule = clip(a.Rule, maxNameLen)
	a.ErrorName = clip(a.ErrorName, maxNameLen)
	a.ErrorCode = clip(a.ErrorCode, maxNameLen)
	a.Message = clip(a.Message, s.cfg.messageChars)
	a.RecoveryAction = clip(a.RecoveryAction, maxTextLen)
	a.Strategy = clip(a.Strategy, maxTextLen)
	a.StopReason = clip(a.StopReason, maxTextLen)
	a.Fallback = clip(a.Fallback, maxNameLen)
	a.Provider = clip(a.Provider, maxNameLen)
	a.Model = clip(a.Model, maxNameLen)
	return a, nil
}

// Record writes attempt a of the tenant's context a.ContextID and returns
// once PostgreSQL has committed it, reporting whether this call inserted
// the row: recording the same (context, attempt) again is harmless and
// returns false, leaving the stored row as it was.
//
// When the context does not exist yet it is begun from ensure (its ID and
// Tenant are taken from a and tenant; StartedAt defaults to a.At), so that
// a single call journals an attempt. A context of another tenant is
// ErrNotFound. The context's AttemptCount and TotalWait are derived from
// its attempts, so they include this one once it is committed. A finished context still takes attempts (a record
// repeated after an outage may arrive late); its report does not change.
//
// Concurrent calls share transactions: a writer gathers calls for up to the
// batch window (or until MaxBatch, or as many as its previous batch, are
// waiting) and commits them together. If the database is down every waiting call gets ErrUnavailable;
// while the store is marked down, calls fail at once. A caller whose ctx is
// done gets ctx's error promptly; its attempt may still be committed, which
// is harmless since recording is idempotent.
func (s *Store) Record(ctx context.Context, tenant string, a Attempt, ensure Context) (bool, error) {
	a, err := s.normalizeAttempt(a)
	if err != nil {
		return false, fmt.Errorf("record attempt: %w", err)
	}
	// op names the call in errors only: built on the error path, it costs
	// the hot path nothing.
	op := func() string { return fmt.Sprintf("record attempt %d of %s", a.Attempt, a.ContextID) }
	ensure.ID = a.ContextID
	ensure.Tenant = tenant
	if ensure, err = s.normalizeContext(ensure, a.At); err != nil {
		return false, fmt.Errorf("%s: %w", op(), err)
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("%s: %w", op(), err)
	}
	if !s.healthy.Load() {
		return false, s.errDown(op())
	}
	p := &pending{ctx: ctx, tenant: tenant, attempt: a, ensure: ensure, queued: time.Now(), done: make(chan result, 1)}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return false, fmt.Errorf("%s: %w: store closed", op(), ErrUnavailable)
	}
	select {
	case s.queueOf(a.ContextID) <- p:
		s.mu.RUnlock()
	case <-ctx.Done():
		s.mu.RUnlock()
		return false, fmt.Errorf("%s: %w", op(), ctx.Err())
	}
	select {
	case r := <-p.done:
		if r.err != nil {
			return false, fmt.Errorf("%s: %w", op(), r.err)
		}
		return r.inserted, nil
	case <-ctx.Done():
		return false, fmt.Errorf("%s: %w", op(), ctx.Err())
	}
}

// attemptColumns is what scanAttempt reads, in order.
const attemptColumns = `context_id::text, attempt, at, duration_ms, failure_type, retryable, rule, http_status,
	error_code, message, recovery_action, coalesce(decision, ''), delay_ms, strategy, stop_reason, fallback,
	provider, model, error_name`

func scanAttempt(row pgx.Row) (Attempt, error) {
	var (
		a                   Attempt
		durationMS, delayMS int64
	)
	err := row.Scan(&a.ContextID, &a.Attempt, &a.At, &durationMS, &a.FailureType, &a.Retryable, &a.Rule,
		&a.HTTPStatus, &a.ErrorCode, &a.Message, &a.RecoveryAction, &a.Decision, &delayMS, &a.Strategy,
		&a.StopReason, &a.Fallback, &a.Provider, &a.Model, &a.ErrorName)
	a.At = a.At.UTC()
	a.Duration = time.Duration(durationMS) * time.Millisecond
	a.Delay = time.Duration(delayMS) * time.Millisecond
	return a, err
}

// attempts reads the attempts 1..upTo of context id, in order.
func (s *Store) attempts(ctx context.Context, q querier, id string, upTo int) ([]Attempt, error) {
	rows, err := q.Query(ctx, `SELECT `+attemptColumns+` FROM retry_attempts
		WHERE context_id = $1 AND attempt <= $2 ORDER BY attempt`, id, upTo)
	if err != nil {
		return nil, err
	}
	attempts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Attempt, error) { return scanAttempt(r) })
	if err != nil {
		return nil, err
	}
	if attempts == nil {
		attempts = []Attempt{}
	}
	return attempts, nil
}
