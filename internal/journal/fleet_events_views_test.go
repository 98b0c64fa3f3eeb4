package journal_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/policyd/policyd/internal/journal"
	"github.com/policyd/policyd/internal/journal/journaltest"
)

// TestFleetViews journals crafted fleet events and attempts, each view's
// under its own tenant, and checks what the fleet post-mortem views say.
func TestFleetViews(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := journaltest.DatabaseURL(t)
	s := openStoreAt(t, url, journal.WithClock(newClock(t0).Now))

	// at("10:00:05.5") is that time on t0's day.
	at := func(hms string) time.Time {
		x, err := time.Parse("15:04:05.999", hms)
		if err != nil {
			t.Fatal(err)
		}
		return t0.Truncate(24 * time.Hour).Add(time.Duration(x.Hour())*time.Hour +
			time.Duration(x.Minute())*time.Minute + time.Duration(x.Second())*time.Second + time.Duration(x.Nanosecond()))
	}
	const bucketB = "availability:anthropic/claude"
	ev := func(tenant, bucket, event, hms, client, reason string) journal.FleetEvent {
		e := fleetEvent(event, at(hms))
		e.Tenant, e.Bucket, e.ClientID, e.Reason = tenant, bucket, client, reason
		return e
	}
	events := []journal.FleetEvent{
		// Breakers. Bucket A opens, half-opens and opens again before it
		// closes, opens and closes, and opens for good; bucket B opens
		// and closes twice.
		ev("breakers", bucketA, journal.FleetBreakerOpen, "10:00:00", "agent-1", "5 failures"),
		ev("breakers", bucketA, journal.FleetBreakerHalfOpen, "10:00:05", "", ""),
		ev("breakers", bucketA, journal.FleetBreakerOpen, "10:00:06", "agent-2", "probe failed"),
		ev("breakers", bucketA, journal.FleetBreakerClose, "10:00:16", "", ""),
		ev("breakers", bucketA, journal.FleetBreakerOpen, "10:05:00", "agent-3", "5 failures"),
		ev("breakers", bucketA, journal.FleetBreakerClose, "10:05:30", "", ""),
		ev("breakers", bucketA, journal.FleetBreakerOpen, "10:10:00", "agent-4", "still failing"),
		ev("breakers", bucketB, journal.FleetBreakerOpen, "10:00:00", "agent-5", "overloaded"),
		ev("breakers", bucketB, journal.FleetBreakerClose, "10:00:02.5", "", ""),
		ev("breakers", bucketB, journal.FleetBreakerOpen, "10:01:00", "agent-5", "overloaded"),
		ev("breakers", bucketB, journal.FleetBreakerClose, "10:01:10", "", ""),
		// Another tenant's close of the same bucket closes nothing of ours.
		ev("globex", bucketA, journal.FleetBreakerClose, "10:10:01", "", ""),

		// First failures. Bucket A: an incident from 10:00:00 (its gaps
		// are under 60 s, the last one 59 s), one from 10:03:29 (after
		// exactly 60 s), one from 10:10:00 whose first event is no
		// failure, and a lone close.
		ev("firsts", bucketA, journal.FleetHoldSet, "10:00:00", "agent-1", "429 from openai"),
		ev("firsts", bucketA, journal.FleetHoldSet, "10:00:10", "agent-2", "429 again"),
		ev("firsts", bucketA, journal.FleetBreakerOpen, "10:00:40", "agent-3", "5 failures"),
		ev("firsts", bucketA, journal.FleetBreakerClose, "10:01:30", "", ""),
		ev("firsts", bucketA, journal.FleetHoldSet, "10:02:29", "agent-4", "429"),
		ev("firsts", bucketA, journal.FleetHoldSet, "10:03:29", "agent-5", "429 after a minute"),
		ev("firsts", bucketA, journal.FleetBudgetExhausted, "10:10:00", "agent-6", "budget"),
		ev("firsts", bucketA, journal.FleetBreakerOpen, "10:10:05", "agent-7", "5 failures"),
		ev("firsts", bucketA, journal.FleetBreakerClose, "10:20:00", "", ""),
		ev("firsts", bucketB, journal.FleetStop, "10:00:30", "agent-9", "key revoked"),
		// Another tenant's event on the bucket does not bridge a gap.
		ev("globex", bucketA, journal.FleetHoldSet, "10:03:00", "agent-x", "429"),
	}
	// Recorded out of order and in two calls: the views order by time.
	wantErr(t, s.RecordFleetEvents(ctx, events[12:]), nil)
	wantErr(t, s.RecordFleetEvents(ctx, events[:12]), nil)

	// Saved attempts: fleet stop reasons only, stops and fallbacks only.
	for _, cx := range []struct {
		tenant, provider, model string
		attempts                []journal.Attempt
	}{
		{"saved", "openai", "gpt-4o", []journal.Attempt{
			{FailureType: "RATE_LIMIT", Decision: journal.DecisionRetry, Delay: time.Second},
			{FailureType: "RATE_LIMIT", Decision: journal.DecisionStop, StopReason: "CIRCUIT_OPEN"}}},
		{"saved", "openai", "gpt-4o", []journal.Attempt{
			{FailureType: "RATE_LIMIT", Decision: journal.DecisionFallBack, StopReason: "RETRY_BUDGET_EXHAUSTED", Fallback: "MODEL"},
			{FailureType: "RATE_LIMIT", Decision: journal.DecisionStop, StopReason: "ATTEMPTS_EXHAUSTED", Model: "gpt-4o-mini"}}},
		{"saved", "openai", "gpt-4o", []journal.Attempt{
			{FailureType: "RATE_LIMIT", Decision: journal.DecisionStop, StopReason: "CIRCUIT_OPEN"}}},
		{"saved", "openai", "gpt-4o", []journal.Attempt{ // the attempt's own provider counts
			{FailureType: "AUTH_INVALID", Decision: journal.DecisionStop, StopReason: "FLEET_STOP", Provider: "anthropic", Model: "claude"}}},
		{"saved", "openai", "gpt-4o", []journal.Attempt{
			{FailureType: "AUTH_INVALID", Decision: journal.DecisionStop, StopReason: "NOT_RETRYABLE"}}},
		{"globex", "openai", "gpt-4o", []journal.Attempt{
			{FailureType: "RATE_LIMIT", Decision: journal.DecisionStop, StopReason: "CIRCUIT_OPEN"}}},
	} {
		c := begin(t, s, journal.Context{Tenant: cx.tenant, Provider: cx.provider, Model: cx.model, StartedAt: t0})
		for i, a := range cx.attempts {
			a.ContextID, a.Attempt, a.At = c.ID, i+1, t0.Add(time.Duration(i)*time.Second)
			record(t, s, cx.tenant, a)
		}
	}

	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	const hms = `'HH24:MI:SS.MS'`
	tests := []struct {
		view, query string
		want        []string
	}{
		{"journal_fleet_breaker_periods", `SELECT bucket, provider, model, to_char(opened_at AT TIME ZONE 'UTC', ` + hms + `),
				coalesce(to_char(closed_at AT TIME ZONE 'UTC', ` + hms + `), '-'), coalesce(open_seconds::text, '-'),
				reason, client_id
			FROM journal_fleet_breaker_periods WHERE tenant = 'breakers' ORDER BY bucket, opened_at`, []string{
			"availability:anthropic/claude openai gpt-4o 10:00:00.000 10:00:02.500 2.500000 overloaded agent-5",
			"availability:anthropic/claude openai gpt-4o 10:01:00.000 10:01:10.000 10.000000 overloaded agent-5",
			"rate_limit:openai/gpt-4o@key-a openai gpt-4o 10:00:00.000 10:00:16.000 16.000000 5 failures agent-1",
			"rate_limit:openai/gpt-4o@key-a openai gpt-4o 10:00:06.000 10:00:16.000 10.000000 probe failed agent-2",
			"rate_limit:openai/gpt-4o@key-a openai gpt-4o 10:05:00.000 10:05:30.000 30.000000 5 failures agent-3",
			"rate_limit:openai/gpt-4o@key-a openai gpt-4o 10:10:00.000 - - still failing agent-4",
		}},
		{"journal_fleet_saved_attempts", `SELECT provider, model, stop_reason, attempts, stops, fallbacks, contexts
			FROM journal_fleet_saved_attempts WHERE tenant = 'saved' ORDER BY 1, 2, 3`, []string{
			"anthropic claude FLEET_STOP 1 1 0 1",
			"openai gpt-4o CIRCUIT_OPEN 2 2 0 2",
			"openai gpt-4o RETRY_BUDGET_EXHAUSTED 1 0 1 1",
		}},
		{"journal_fleet_first_failures", `SELECT bucket, event, to_char(at AT TIME ZONE 'UTC', ` + hms + `), client_id, reason,
				to_char(incident_started_at AT TIME ZONE 'UTC', ` + hms + `)
			FROM journal_fleet_first_failures WHERE tenant = 'firsts' ORDER BY bucket, at`, []string{
			"availability:anthropic/claude fleet_stop 10:00:30.000 agent-9 key revoked 10:00:30.000",
			"rate_limit:openai/gpt-4o@key-a hold_set 10:00:00.000 agent-1 429 from openai 10:00:00.000",
			"rate_limit:openai/gpt-4o@key-a hold_set 10:03:29.000 agent-5 429 after a minute 10:03:29.000",
			"rate_limit:openai/gpt-4o@key-a breaker_open 10:10:05.000 agent-7 5 failures 10:10:00.000",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.view, func(t *testing.T) {
			got := queryLines(t, conn, tt.query)
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("%s:\n%s\nwant:\n%s", tt.view, strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}
