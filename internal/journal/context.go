package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Outcome is how a context ended, or OutcomeInProgress while it runs.
type Outcome string

// The outcomes, as stored in retry_contexts.outcome.
const (
	// OutcomeInProgress is a context that has not been finished.
	OutcomeInProgress Outcome = "in_progress"
	// OutcomeResolved is an operation that succeeded, possibly after retries.
	OutcomeResolved Outcome = "resolved"
	// OutcomeFailed is an operation that failed for good; finishing a
	// context as failed writes its error report.
	OutcomeFailed Outcome = "failed"
	// OutcomeAbandoned is a caller that gave up without a verdict.
	OutcomeAbandoned Outcome = "abandoned"
)

func (o Outcome) valid() bool {
	switch o {
	case OutcomeInProgress, OutcomeResolved, OutcomeFailed, OutcomeAbandoned:
		return true
	}
	return false
}

// Context is a RetryContext: one operation that may be retried, and the
// running totals of its attempts.
type Context struct {
	// ID is a UUID in canonical form. BeginContext makes one (version 4)
	// when it is empty.
	ID string
	// Tenant isolates contexts: a context is visible only to its tenant.
	// Empty is a tenant like any other (a daemon without tenants).
	Tenant string
	// Agent, Provider, Model, Operation and Profile describe the operation;
	// each at most 256 characters.
	Agent, Provider, Model, Operation, Profile string
	// Labels are free key/value pairs: at most 64, keys non-empty and at
	// most 64 bytes, values at most 256 bytes, 4 KiB in all.
	Labels map[string]string
	// StartedAt defaults to the store's clock (BeginContext) or the time of
	// the first recorded attempt (Record). FinishedAt is zero until the
	// context is finished.
	StartedAt, FinishedAt time.Time
	// Outcome is OutcomeInProgress until FinishContext.
	Outcome Outcome
	// AttemptCount is the highest attempt number recorded; TotalWait the
	// sum of the delays decided after the attempts (millisecond precision).
	AttemptCount int
	TotalWait    time.Duration
}

// Limits on what one context or attempt may hold, so that no row grows
// without bound. The store enforces them before a row is queued; the
// schema no longer re-checks them row by row (migration 007).
const (
	maxNameLen       = 256  // characters: tenant, agent, provider, model, ... rule, error code
	maxTextLen       = 1024 // characters: recovery action, strategy, stop reason (the message: WithMessageChars)
	maxLabels        = 64
	maxLabelKeyLen   = 64   // bytes
	maxLabelValueLen = 256  // bytes
	maxLabelsBytes   = 4096 // bytes of JSON; jsonb adds at most 8 bytes a pair, under the 8 KiB CHECK
)

// normalizeID returns id in canonical UUID form, or an error naming field.
func normalizeID(field, id string) (string, error) {
	if id == "" {
		return "", invalid(field, "is required")
	}
	u, err := uuid.Parse(id)
	if err != nil || len(id) != 36 {
		return "", invalid(field, "must be a UUID such as 123e4567-e89b-12d3-a456-426614174000, got %q", clip(id, 64))
	}
	return u.String(), nil
}

// newContextID makes a context id: a time-ordered UUID (version 7), so
// that new contexts go to the right-hand edge of the primary key's B-tree.
// Random (version 4) ids land on any of its pages: on a large journal each
// first write of a page after a checkpoint logs the whole page, measured at
// +60 % WAL and 6-7 µs more per row. docs/operations.md says the same to
// clients choosing their own ids.
func newContextID() string {
	if u, err := uuid.NewV7(); err == nil {
		return u.String()
	}
	return uuid.NewString() // only when the system's random source fails
}

// normalizeContext checks c and fills the defaults: a new id when it has
// none, StartedAt, and an in-progress outcome. The fields a caller cannot
// set on a new context (outcome, finish, totals) are reset.
func (s *Store) normalizeContext(c Context, defaultStart time.Time) (Context, error) {
	if c.ID == "" {
		c.ID = newContextID()
	} else {
		id, err := normalizeID("context_id", c.ID)
		if err != nil {
			return Context{}, err
		}
		c.ID = id
	}
	for _, f := range []struct{ name, v string }{
		{"tenant", c.Tenant}, {"agent", c.Agent}, {"provider", c.Provider}, {"model", c.Model},
		{"operation", c.Operation}, {"profile", c.Profile},
	} {
		if err := checkName(f.name, f.v); err != nil {
			return Context{}, err
		}
	}
	if err := checkLabels(c.Labels); err != nil {
		return Context{}, err
	}
	if c.StartedAt.IsZero() {
		c.StartedAt = defaultStart
	}
	c.StartedAt = dbTime(c.StartedAt)
	c.FinishedAt = time.Time{}
	c.Outcome = OutcomeInProgress
	c.AttemptCount = 0
	c.TotalWait = 0
	return c, nil
}

func checkLabels(labels map[string]string) error {
	if len(labels) == 0 {
		return nil // the common case, and nothing to marshal
	}
	if len(labels) > maxLabels {
		return invalid("labels", "at most %d labels, got %d", maxLabels, len(labels))
	}
	for k, v := range labels {
		if k == "" || len(k) > maxLabelKeyLen {
			return invalid("labels", "keys must be 1 to %d bytes, got %q", maxLabelKeyLen, clip(k, 64))
		}
		if len(v) > maxLabelValueLen {
			return invalid("labels", "value of %q must be at most %d bytes, got %d", k, maxLabelValueLen, len(v))
		}
		if err := checkText("labels", k); err != nil {
			return err
		}
		if err := checkText("labels", v); err != nil {
			return err
		}
	}
	b, err := json.Marshal(labelsOrEmpty(labels))
	if err != nil {
		return invalid("labels", "%v", err)
	}
	if len(b) > maxLabelsBytes {
		return invalid("labels", "must be at most %d bytes as JSON, got %d", maxLabelsBytes, len(b))
	}
	return nil
}

func labelsOrEmpty(l map[string]string) map[string]string {
	if l == nil {
		return map[string]string{}
	}
	return l
}

func labelsJSON(l map[string]string) string {
	if len(l) == 0 {
		return "{}"
	}
	b, _ := json.Marshal(labelsOrEmpty(l)) // a map[string]string always marshals
	return string(b)
}

// contextColumns is what scanContext reads, in order, from the
// journal_contexts view: a context row with the totals of its attempts.
const contextColumns = `id::text, tenant, agent, provider, model, operation, profile, labels,
	started_at, finished_at, outcome, attempt_count, total_wait_ms`

// newContextColumns is contextColumns for a context just inserted into
// retry_contexts (RETURNING), which has no attempts yet.
const newContextColumns = `id::text, tenant, agent, provider, model, operation, profile, labels,
	started_at, finished_at, outcome, 0, 0::bigint`

func scanContext(row pgx.Row) (Context, error) {
	var (
		c        Context
		finished *time.Time
		waitMS   int64
	)
	err := row.Scan(&c.ID, &c.Tenant, &c.Agent, &c.Provider, &c.Model, &c.Operation, &c.Profile, &c.Labels,
		&c.StartedAt, &finished, &c.Outcome, &c.AttemptCount, &waitMS)
	if err != nil {
		return Context{}, err
	}
	c.StartedAt = c.StartedAt.UTC()
	if finished != nil {
		c.FinishedAt = finished.UTC()
	}
	c.TotalWait = time.Duration(waitMS) * time.Millisecond
	if c.Labels == nil {
		c.Labels = map[string]string{}
	}
	return c, nil
}

// BeginContext starts the context c under c.Tenant and returns it as
// stored. Its id is optional: without one the store makes a version 4 UUID.
// With one, beginning is idempotent: when the context already exists for
// the tenant, BeginContext returns it unchanged with created false (the
// fields of c are then ignored). An id that exists under another tenant is
// ErrNotFound, which reveals nothing about the other tenant.
//
// StartedAt defaults to the store's clock; Outcome, FinishedAt, AttemptCount
// and TotalWait of c are ignored.
func (s *Store) BeginContext(ctx context.Context, c Context) (Context, bool, error) {
	c, err := s.normalizeContext(c, s.now())
	if err != nil {
		return Context{}, false, fmt.Errorf("begin context: %w", err)
	}
	var (
		out     Context
		created bool
	)
	err = s.run(ctx, "begin context "+c.ID, func(ctx context.Context) error {
		var err error
		out, err = scanContext(s.pool.QueryRow(ctx, `
			INSERT INTO retry_contexts (id, tenant, agent, provider, model, operation, profile, labels, started_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8::text::jsonb, $9)
			ON CONFLICT (id) DO NOTHING
			RETURNING `+newContextColumns,
			c.ID, c.Tenant, c.Agent, c.Provider, c.Model, c.Operation, c.Profile, labelsJSON(c.Labels), c.StartedAt))
		if err == nil {
			created = true
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		out, err = s.getContext(ctx, s.pool, c.Tenant, c.ID)
		return err
	})
	if err != nil {
		return Context{}, false, err
	}
	return out, created, nil
}

// querier is what the store reads through: the pool or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func (s *Store) getContext(ctx context.Context, q querier, tenant, id string) (Context, error) {
	return scanContext(q.QueryRow(ctx, `SELECT `+contextColumns+` FROM journal_contexts WHERE id = $1 AND tenant = $2`, id, tenant))
}

// GetContext returns the tenant's context id with its attempts in order.
// ErrNotFound when the tenant has no such context.
func (s *Store) GetContext(ctx context.Context, tenant, id string) (Context, []Attempt, error) {
	id, err := normalizeID("context_id", id)
	if err != nil {
		return Context{}, nil, fmt.Errorf("get context: %w", err)
	}
	var (
		c        Context
		attempts []Attempt
	)
	err = s.run(ctx, "get context "+id, func(ctx context.Context) error {
		tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead})
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(ctx) }() // read-only: nothing to undo, and an error changes nothing
		if c, err = s.getContext(ctx, tx, tenant, id); err != nil {
			return err
		}
		attempts, err = s.attempts(ctx, tx, id, MaxAttempt)
		return err
	})
	if err != nil {
		return Context{}, nil, err
	}
	return c, attempts, nil
}

// FinishContext ends the tenant's context id with outcome (resolved, failed
// or abandoned) at the store's clock. Finishing is idempotent: finishing
// again with the same outcome returns the context (and report) as they are;
// a different outcome is ErrInvalid ("already finished as ...").
//
// OutcomeFailed writes the context's error report from its attempts, in the
// same transaction, and returns it; for other outcomes the report is nil.
func (s *Store) FinishContext(ctx context.Context, tenant, id string, outcome Outcome) (Context, *Report, error) {
	id, err := normalizeID("context_id", id)
	if err != nil {
		return Context{}, nil, fmt.Errorf("finish context: %w", err)
	}
	if !outcome.valid() || outcome == OutcomeInProgress {
		return Context{}, nil, fmt.Errorf("finish context: %w",
			invalid("outcome", "must be %s, %s or %s, got %q", OutcomeResolved, OutcomeFailed, OutcomeAbandoned, outcome))
	}
	var (
		c      Context
		report *Report
		now    = s.now()
	)
	err = s.run(ctx, "finish context "+id, func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			// Lock the context first: concurrent finishes of one context
			// take turns, so exactly one writes the report.
			var current Outcome
			err := tx.QueryRow(ctx, `SELECT outcome FROM retry_contexts WHERE id = $1 AND tenant = $2 FOR UPDATE`,
				id, tenant).Scan(&current)
			if err != nil {
				return err
			}
			if current != OutcomeInProgress {
				if current != outcome {
					return invalid("outcome", "context %s already finished as %s", id, current)
				}
				if c, err = s.getContext(ctx, tx, tenant, id); err != nil {
					return err
				}
				if outcome == OutcomeFailed {
					r, err := s.errorReport(ctx, tx, tenant, id)
					if err != nil {
						return err
					}
					report = &r
				}
				return nil
			}
			if _, err = tx.Exec(ctx, `UPDATE retry_contexts SET outcome = $2, finished_at = $3 WHERE id = $1`,
				id, outcome, now); err != nil {
				return err
			}
			c, err = s.getContext(ctx, tx, tenant, id)
			if err != nil || outcome != OutcomeFailed {
				return err
			}
			attempts, err := s.attempts(ctx, tx, id, MaxAttempt)
			if err != nil {
				return err
			}
			r := buildReport(c, attempts, now, s.typeTextFunc())
			last := 0
			if len(attempts) > 0 {
				last = attempts[len(attempts)-1].Attempt
			}
			_, err = tx.Exec(ctx, `
				INSERT INTO error_reports (context_id, tenant, created_at, root_cause_type, root_cause_rule, root_cause_message,
					recovery_action, unrecoverable, manual_action, last_attempt, text)
				VALUES ($1, $11, $2, $3, $4, $5, $6, $7, $8, $9, $10)
				ON CONFLICT (context_id) DO NOTHING`,
				id, r.CreatedAt, r.RootCauseType, r.RootCauseRule, r.RootCauseMessage,
				r.RecoveryAction, r.Unrecoverable, r.ManualAction, last, r.Text, tenant)
			report = &r
			return err
		})
	})
	if err != nil {
		return Context{}, nil, err
	}
	return c, report, nil
}
