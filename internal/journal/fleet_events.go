package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// The fleet transitions, as stored in fleet_events.event.
const (
	FleetHoldSet         = "hold_set"
	FleetBreakerOpen     = "breaker_open"
	FleetBreakerHalfOpen = "breaker_half_open"
	FleetBreakerClose    = "breaker_close"
	FleetBudgetExhausted = "budget_exhausted"
	FleetStop            = "fleet_stop"
	FleetShed            = "shed"
	FleetSlowStart       = "slow_start"
	FleetTenantLimit     = "tenant_limit"
	FleetClear           = "fleet_clear"
	FleetPace            = "pace"
)

// fleetEvents are the transitions fleet_events' CHECK allows.
var fleetEvents = []string{FleetHoldSet, FleetBreakerOpen, FleetBreakerHalfOpen, FleetBreakerClose, FleetBudgetExhausted,
	FleetStop, FleetShed, FleetSlowStart, FleetTenantLimit, FleetClear, FleetPace}

// The scopes of fleet state, as stored in fleet_events.scope.
const (
	FleetScopeRateLimit    = "rate_limit"
	FleetScopeAvailability = "availability"
	FleetScopeAuth         = "auth"
)

// Limits of fleet events; the schema repeats them as CHECK constraints.
const (
	// maxBucketLen is longer than a name: a bucket joins a scope, a
	// provider, a model and a key id.
	maxBucketLen = 1024
	// maxFleetCounts and maxFleetCountKeyLen keep Counts small (the schema
	// checks 4 KiB of jsonb): a transition has a handful of numbers.
	maxFleetCounts      = 32
	maxFleetCountKeyLen = 64
	// MaxFleetEventsPerCall bounds one RecordFleetEvents call, so that a
	// batch is one short statement.
	MaxFleetEventsPerCall = 1000
)

// FleetEvent is one fleet transition.
type FleetEvent struct {
	// At is when the transition happened; defaults to the store's clock.
	At time.Time
	// Tenant whose state changed; Bucket what the state is kept for (e.g.
	// "rate_limit:openai/gpt-4o@key-a", required); Scope one of the
	// FleetScope constants. KeyID names the API key, never the key itself.
	Tenant, Bucket, Scope, Provider, Model, KeyID string
	// Event is one of the Fleet constants (FleetHoldSet, ...); Reason why
	// (cut to 1024 characters); ClientID the client whose failure caused
	// it; Replica the daemon replica that journaled it.
	Event, Reason, ClientID, Replica string
	// Identity is the authenticated credential of the caller that caused
	// it, Peer the caller's address ("" when no call did).
	Identity, Peer string
	// Counts are the numbers behind the transition, e.g. "failures",
	// "clients", "hold_ms", "open_ms". Empty reads back as nil.
	Counts map[string]int64
}

// normalizeFleetEvent checks e and makes it storable. Names are rejected
// when too long (a cut name would match another bucket or tenant); the
// reason is evidence, so it is cut rather than refused.
func (s *Store) normalizeFleetEvent(e FleetEvent) (FleetEvent, error) {
	if e.Bucket == "" {
		return FleetEvent{}, invalid("bucket", "is required")
	}
	if err := checkText("bucket", e.Bucket); err != nil {
		return FleetEvent{}, err
	}
	if n := utf8.RuneCountInString(e.Bucket); n > maxBucketLen {
		return FleetEvent{}, invalid("bucket", "must be at most %d characters, got %d", maxBucketLen, n)
	}
	for _, f := range []struct{ name, v string }{
		{"tenant", e.Tenant}, {"provider", e.Provider}, {"model", e.Model}, {"key_id", e.KeyID},
		{"client_id", e.ClientID}, {"replica", e.Replica}, {"identity", e.Identity}, {"peer", e.Peer},
	} {
		if err := checkName(f.name, f.v); err != nil {
			return FleetEvent{}, err
		}
	}
	switch e.Scope {
	case FleetScopeRateLimit, FleetScopeAvailability, FleetScopeAuth:
	default:
		return FleetEvent{}, invalid("scope", "must be %q, %q or %q, got %q",
			FleetScopeRateLimit, FleetScopeAvailability, FleetScopeAuth, clip(e.Scope, 64))
	}
	if !slices.Contains(fleetEvents, e.Event) {
		return FleetEvent{}, invalid("event", "must be one of %s; got %q", strings.Join(fleetEvents, ", "), clip(e.Event, 64))
	}
	if len(e.Counts) > maxFleetCounts {
		return FleetEvent{}, invalid("counts", "at most %d counts, got %d", maxFleetCounts, len(e.Counts))
	}
	for k := range e.Counts {
		if k == "" || len(k) > maxFleetCountKeyLen {
			return FleetEvent{}, invalid("counts", "keys must be 1 to %d bytes, got %q", maxFleetCountKeyLen, clip(k, 64))
		}
		if err := checkText("counts", k); err != nil {
			return FleetEvent{}, err
		}
	}
	if e.At.IsZero() {
		e.At = s.cfg.now()
	}
	e.At = dbTime(e.At)
	e.Reason = clip(e.Reason, maxTextLen)
	return e, nil
}

func countsJSON(c map[string]int64) string {
	if len(c) == 0 {
		return "{}"
	}
	b, _ := json.Marshal(c) // a map[string]int64 with valid UTF-8 keys always marshals
	return string(b)
}

// insertFleetEventsSQL inserts a batch in one statement, in the order given.
const insertFleetEventsSQL = `
	INSERT INTO fleet_events (at, tenant, bucket, scope, provider, model, key_id, event, reason, client_id, replica, counts, identity, peer)
	SELECT at, tenant, bucket, scope, provider, model, key_id, event, reason, client_id, replica, counts::jsonb, identity, peer
	FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
	            $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[]) WITH ORDINALITY
	     AS t(at, tenant, bucket, scope, provider, model, key_id, event, reason, client_id, replica, counts, identity, peer, n)
	ORDER BY n`

// RecordFleetEvents writes events in one statement, after checking every
// one of them: a bad event fails the whole call with an *InvalidError
// naming it, e.g. "events[3].bucket", and nothing is written. An empty
// call writes nothing. Unlike Record, it is not idempotent: events have no
// natural key, so a call repeated after ErrUnavailable (whose commit may
// have happened) can journal a transition twice.
func (s *Store) RecordFleetEvents(ctx context.Context, events []FleetEvent) error {
	if len(events) == 0 {
		return nil
	}
	if len(events) > MaxFleetEventsPerCall {
		return fmt.Errorf("record fleet events: %w",
			invalid("events", "at most %d events a call, got %d", MaxFleetEventsPerCall, len(events)))
	}
	n := len(events)
	col := func() []string { return make([]string, n) }
	at := make([]time.Time, n)
	tenant, bucket, scope, provider, model, keyID := col(), col(), col(), col(), col(), col()
	event, reason, clientID, replica, counts := col(), col(), col(), col(), col()
	identity, peer := col(), col()
	for i, e := range events {
		e, err := s.normalizeFleetEvent(e)
		if err != nil {
			if ie, ok := errors.AsType[*InvalidError](err); ok {
				err = &InvalidError{Field: fmt.Sprintf("events[%d].%s", i, ie.Field), Description: ie.Description}
			}
			return fmt.Errorf("record fleet events: %w", err)
		}
		at[i], tenant[i], bucket[i], scope[i], provider[i], model[i] = e.At, e.Tenant, e.Bucket, e.Scope, e.Provider, e.Model
		keyID[i], event[i], reason[i], clientID[i], replica[i] = e.KeyID, e.Event, e.Reason, e.ClientID, e.Replica
		counts[i] = countsJSON(e.Counts)
		identity[i], peer[i] = e.Identity, e.Peer
	}
	return s.run(ctx, fmt.Sprintf("record %d fleet events", n), func(ctx context.Context) error {
		_, err := s.pool.Exec(ctx, insertFleetEventsSQL, at, tenant, bucket, scope, provider, model, keyID,
			event, reason, clientID, replica, counts, identity, peer)
		return err
	})
}

// ListFleetEvents returns the tenant's fleet events at or after since (zero:
// from the start), newest first, at most limit of them (0: DefaultPageSize;
// cut to MaxPageSize). An empty bucket lists every bucket of the tenant.
func (s *Store) ListFleetEvents(ctx context.Context, tenant, bucket string, since time.Time, limit int) ([]FleetEvent, error) {
	switch {
	case limit < 0:
		return nil, fmt.Errorf("list fleet events: %w", invalid("limit", "must not be negative, got %d", limit))
	case limit == 0:
		limit = DefaultPageSize
	case limit > MaxPageSize:
		limit = MaxPageSize
	}
	var events []FleetEvent
	err := s.run(ctx, "list fleet events", func(ctx context.Context) error {
		// The NULL tests fold the optional filters into one plan; the
		// (tenant, bucket, at) index serves a bucket's history.
		rows, err := s.pool.Query(ctx, `
			SELECT at, tenant, bucket, scope, provider, model, key_id, event, reason, client_id, replica, counts, identity, peer
			FROM fleet_events
			WHERE tenant = $1 AND ($2 = '' OR bucket = $2) AND ($3::timestamptz IS NULL OR at >= $3)
			ORDER BY at DESC, id DESC
			LIMIT $4`, tenant, bucket, nullTime(since), limit)
		if err != nil {
			return err
		}
		events, err = pgx.CollectRows(rows, scanFleetEvent)
		return err
	})
	if err != nil {
		return nil, err
	}
	if events == nil {
		events = []FleetEvent{}
	}
	return events, nil
}

// scanFleetEvent reads a fleet_events row as ListFleetEvents selects it.
func scanFleetEvent(r pgx.CollectableRow) (FleetEvent, error) {
	var e FleetEvent
	err := r.Scan(&e.At, &e.Tenant, &e.Bucket, &e.Scope, &e.Provider, &e.Model, &e.KeyID, &e.Event,
		&e.Reason, &e.ClientID, &e.Replica, &e.Counts, &e.Identity, &e.Peer)
	e.At = e.At.UTC()
	if len(e.Counts) == 0 {
		e.Counts = nil
	}
	return e, err
}

// nullTime is t, or NULL for the zero time.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
