package journal

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Breaker states of an incident's breaker (Incident.BreakerState).
const (
	BreakerOpen     = "open"
	BreakerHalfOpen = "half_open"
	BreakerClosed   = "closed"
)

// Incident is one bucket's trouble, from its first failure to its recovery:
// a row of the incidents view. docs/postmortem.md says how each field is
// derived.
type Incident struct {
	// ID is the id of the incident's first fleet event.
	ID                                            int64
	Tenant, Bucket, Scope, Provider, Model, KeyID string
	// StartedAt and LastEventAt are its first and last fleet event.
	StartedAt, LastEventAt time.Time
	// RecoveredAt is when the bucket was well again (zero: not yet, or
	// never seen: its daemon stopped with the breaker open).
	RecoveredAt time.Time
	// Open: the bucket is still in trouble.
	Open bool
	// FirstEvent, FirstReason are the first event and why;
	// FirstClientID the client the first event that names one names.
	FirstEvent, FirstReason, FirstClientID string
	// The first failure: from the journal when an agent journaled it, with
	// its context and that context's agent (else the first event's time, and
	// the type its reason names, if any).
	FirstFailureAt                                                               time.Time
	FirstFailureType, FirstFailureRule, FirstFailureContextID, FirstFailureAgent string
	// Recovery is from the first failure to RecoveredAt (0: not recovered).
	Recovery time.Duration
	// BreakerState is the breaker's last move (BreakerOpen, ...), "" when
	// the incident moved no breaker.
	BreakerState string
	// Counts of the incident's events.
	BreakerOpens, Holds, Stops, BudgetExhausted, Clears, Events int
	// Shed is the first attempts the clients' gates did not send; Parked
	// those they parked at their first check (calls that waited for the
	// fleet instead of failing; those that gave up are in Shed too);
	// GateFellBack, of Shed, those they sent to the assignment's fallback.
	Shed, Parked, GateFellBack int64
	// From the journal: the bucket's failures, the retries the fleet held,
	// those it stopped or sent to a fallback, and the estimate of attempts
	// it spared the provider at the BaselinePerSecond the agents were
	// failing at when it stepped in.
	FailedAttempts, RetriesHeld, Stopped, FellBack, RetriesAvoided int64
	BaselinePerSecond                                              float64
	// Until is where the journal counts stop: RecoveredAt, the time of
	// the query while the incident is open, or its last event.
	Until time.Time
}

// IncidentFilter selects the incidents ListIncidents returns; every field is
// optional.
type IncidentFilter struct {
	// OpenOnly keeps the incidents still in trouble.
	OpenOnly bool
	// Since keeps the incidents in trouble at or after it: open ones, and
	// those whose last event or recovery is at or after it.
	Since time.Time
	// Provider, Model and Bucket keep those of the bucket's provider, model
	// or name (exact match).
	Provider, Model, Bucket string
	// PageSize: 0 means DefaultPageSize, more than MaxPageSize MaxPageSize.
	PageSize int
	// PageToken continues a listing: the previous call's next token.
	PageToken string
}

// IncidentDetail is an incident with its timeline: its fleet events in
// order, and its activity over time.
type IncidentDetail struct {
	Incident
	Events   []FleetEvent
	Activity []ActivityBin
}

// ActivityBin is what happened on an incident's bucket in one interval of
// its timeline.
type ActivityBin struct {
	Start time.Time
	Width time.Duration
	// From the journal: failed attempts of the bucket, retries the fleet
	// held, and contexts that resolved (calls that got through in the end).
	Failed, RetriesHeld, Resolved int64
	// From the events: first attempts the gates did not send, those they
	// parked, and the breaker's state at the end of the interval ("" before
	// any move).
	Shed, Parked int64
	Breaker      string
}

// maxActivityBins is how many intervals a timeline has at most: enough for
// a chart, few enough for one answer.
const maxActivityBins = 60

// activityTail is the least a timeline goes on after the incident's end.
const activityTail = 10 * time.Second

const incidentColumns = `incident_id, tenant, bucket, scope, provider, model, key_id, started_at, last_event_at,
	recovered_at, open, first_event, first_reason, first_client_id, first_failure_at, first_failure_type,
	first_failure_rule, coalesce(first_failure_context_id::text, ''), first_failure_agent, coalesce(recovery_seconds, 0)::float8,
	coalesce(breaker_state, ''), breaker_opens, holds, stops, budget_exhausted, clears, events, shed,
	failed_attempts, retries_held, stopped, fell_back, baseline_per_second::float8, retries_avoided, until_at,
	parked, gate_fell_back`

func scanIncident(row pgx.Row) (Incident, error) {
	var (
		in        Incident
		recovered *time.Time
		seconds   float64
	)
	err := row.Scan(&in.ID, &in.Tenant, &in.Bucket, &in.Scope, &in.Provider, &in.Model, &in.KeyID, &in.StartedAt,
		&in.LastEventAt, &recovered, &in.Open, &in.FirstEvent, &in.FirstReason, &in.FirstClientID, &in.FirstFailureAt,
		&in.FirstFailureType, &in.FirstFailureRule, &in.FirstFailureContextID, &in.FirstFailureAgent, &seconds, &in.BreakerState,
		&in.BreakerOpens, &in.Holds, &in.Stops, &in.BudgetExhausted, &in.Clears, &in.Events, &in.Shed,
		&in.FailedAttempts, &in.RetriesHeld, &in.Stopped, &in.FellBack, &in.BaselinePerSecond, &in.RetriesAvoided, &in.Until,
		&in.Parked, &in.GateFellBack)
	if err != nil {
		return Incident{}, err
	}
	in.StartedAt, in.LastEventAt, in.FirstFailureAt, in.Until = in.StartedAt.UTC(), in.LastEventAt.UTC(), in.FirstFailureAt.UTC(), in.Until.UTC()
	if recovered != nil {
		in.RecoveredAt = recovered.UTC()
		in.Recovery = time.Duration(math.Round(seconds * float64(time.Second)))
	}
	return in, nil
}

// ListIncidents lists the tenant's incidents that match f, newest first (by
// start, then id), a page at a time; nextPageToken is empty on the last
// page. A PageToken that did not come from ListIncidents is ErrInvalid
// naming "page_token".
func (s *Store) ListIncidents(ctx context.Context, tenant string, f IncidentFilter) ([]Incident, string, error) {
	size := f.PageSize
	switch {
	case size < 0:
		return nil, "", fmt.Errorf("list incidents: %w", invalid("page_size", "must not be negative, got %d", size))
	case size == 0:
		size = DefaultPageSize
	case size > MaxPageSize:
		size = MaxPageSize
	}
	where := []string{"tenant = $1"}
	args := []any{tenant}
	add := func(cond string, arg any) {
		args = append(args, arg)
		where = append(where, strings.ReplaceAll(cond, "$?", "$"+strconv.Itoa(len(args))))
	}
	if f.OpenOnly {
		where = append(where, "open")
	}
	if !f.Since.IsZero() {
		add("(open OR last_event_at >= $? OR recovered_at >= $?)", f.Since)
	}
	if f.Provider != "" {
		add("provider = $?", strings.ToLower(f.Provider))
	}
	if f.Model != "" {
		add("model = $?", f.Model)
	}
	if f.Bucket != "" {
		add("bucket = $?", f.Bucket)
	}
	if f.PageToken != "" {
		at, id, err := decodeIncidentToken(f.PageToken)
		if err != nil {
			return nil, "", fmt.Errorf("list incidents: %w", err)
		}
		args = append(args, at, id)
		where = append(where, fmt.Sprintf("(started_at, incident_id) < ($%d, $%d)", len(args)-1, len(args)))
	}
	args = append(args, size+1)
	sql := `SELECT ` + incidentColumns + ` FROM incidents WHERE ` + strings.Join(where, " AND ") + `
		ORDER BY started_at DESC, incident_id DESC LIMIT $` + strconv.Itoa(len(args))
	var list []Incident
	err := s.run(ctx, "list incidents", func(ctx context.Context) error {
		rows, err := s.pool.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		list, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Incident, error) { return scanIncident(r) })
		return err
	})
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(list) > size {
		list = list[:size]
		last := list[size-1]
		next = encodeIncidentToken(last.StartedAt, last.ID)
	}
	if list == nil {
		list = []Incident{}
	}
	return list, next, nil
}

// GetIncident returns the tenant's incident id with its timeline: its
// events in order and its activity in at most 60 intervals from its first
// failure to its end. ErrNotFound when the tenant has no such incident.
func (s *Store) GetIncident(ctx context.Context, tenant string, id int64) (IncidentDetail, error) {
	var d IncidentDetail
	err := s.run(ctx, "get incident", func(ctx context.Context) error {
		tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead})
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		if d.Incident, err = scanIncident(tx.QueryRow(ctx,
			`SELECT `+incidentColumns+` FROM incidents WHERE tenant = $1 AND incident_id = $2`, tenant, id)); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `
			SELECT at, tenant, bucket, scope, provider, model, key_id, event, reason, client_id, replica, counts, identity, peer
			FROM incident_events WHERE tenant = $1 AND bucket = $2 AND incident_id = $3
			ORDER BY at, event_id`, tenant, d.Bucket, id)
		if err != nil {
			return err
		}
		if d.Events, err = pgx.CollectRows(rows, scanFleetEvent); err != nil {
			return err
		}
		d.Activity, err = activity(ctx, tx, d.Incident, d.Events)
		return err
	})
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return IncidentDetail{}, fmt.Errorf("get incident %d: %w", id, ErrNotFound)
		}
		return IncidentDetail{}, err
	}
	return d, nil
}

// activity bins the incident's journal counts (from incident_attempts) and
// its events over its span, from the first failure to Until.
func activity(ctx context.Context, tx pgx.Tx, in Incident, events []FleetEvent) ([]ActivityBin, error) {
	start := in.FirstFailureAt
	if in.StartedAt.Before(start) {
		start = in.StartedAt
	}
	// The chart goes on a little past the end, to show the calls that got
	// through after the recovery.
	end := in.Until
	if last := in.LastEventAt; last.After(end) {
		end = last
	}
	end = end.Add(max(activityTail, end.Sub(start)/5))
	span := end.Sub(start)
	width := max(time.Second, (span/maxActivityBins + time.Second - 1).Truncate(time.Second))
	n := int(span/width) + 1
	bins := make([]ActivityBin, n)
	for i := range bins {
		bins[i].Start, bins[i].Width = start.Add(time.Duration(i)*width), width
	}
	index := func(at time.Time) int { return min(n-1, max(0, int(at.Sub(start)/width))) }
	rows, err := tx.Query(ctx, `
		SELECT context_id::text, at, in_scope, decision = 'retry' AND at >= $4, outcome = 'resolved', finished_at
		FROM incident_attempts WHERE tenant = $1 AND bucket = $2 AND incident_id = $3`,
		in.Tenant, in.Bucket, in.ID, in.StartedAt)
	if err != nil {
		return nil, err
	}
	resolved := map[string]bool{} // a context resolves once, whatever its attempts
	var (
		contextID           string
		at                  time.Time
		inScope, held, done bool
		finished            *time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&contextID, &at, &inScope, &held, &done, &finished}, func() error {
		i := index(at)
		if inScope {
			bins[i].Failed++
			if held {
				bins[i].RetriesHeld++
			}
		}
		if done && finished != nil && !finished.After(end) && !resolved[contextID] {
			resolved[contextID] = true
			bins[index(*finished)].Resolved++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	state, next := "", 0
	for i := range bins {
		binEnd := bins[i].Start.Add(width)
		for ; next < len(events) && (events[next].At.Before(binEnd) || i == n-1); next++ {
			e := events[next]
			switch e.Event {
			case FleetBreakerOpen:
				state = BreakerOpen
			case FleetBreakerHalfOpen:
				state = BreakerHalfOpen
			case FleetBreakerClose:
				state = BreakerClosed
			case FleetClear:
				if what, _, _ := strings.Cut(e.Reason, ":"); strings.Contains(what, "breaker") && state != "" {
					state = BreakerClosed
				}
			case FleetShed:
				bins[i].Shed += e.Counts["shed"]
				bins[i].Parked += e.Counts["parked"]
			}
		}
		bins[i].Breaker = state
	}
	return bins, nil
}

// An incident page token is the keyset of a page's last incident: its
// start in Unix microseconds and its id, base64url-encoded so that clients
// treat it as opaque.
const incidentTokenVersion = "i1"

func encodeIncidentToken(startedAt time.Time, id int64) string {
	raw := incidentTokenVersion + "." + strconv.FormatInt(startedAt.UnixMicro(), 10) + "." + strconv.FormatInt(id, 10)
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

func decodeIncidentToken(token string) (time.Time, int64, error) {
	bad := invalid("page_token", "is not a token from a previous ListIncidents call")
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return time.Time{}, 0, bad
	}
	parts := strings.Split(string(raw), ".")
	if len(parts) != 3 || parts[0] != incidentTokenVersion {
		return time.Time{}, 0, bad
	}
	micros, err1 := strconv.ParseInt(parts[1], 10, 64)
	id, err2 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil {
		return time.Time{}, 0, bad
	}
	return time.UnixMicro(micros).UTC(), id, nil
}
