package journal_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/enums"
	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/journal"
	"github.com/policyd/policyd/internal/journal/journaltest"
)

const bucketAv = "availability:openai/gpt-4o"

// incidentFixture journals, for tenant acme, the events and attempts of
// five incidents and one of another tenant (see TestIncidents), relative to
// t0, and an incident still open, relative to now.
type incidentFixture struct {
	s            *journal.Store
	clk          *clock
	now          time.Time
	firstContext string // the context of the outage's first failure
}

func newIncidentFixture(t *testing.T) *incidentFixture {
	t.Helper()
	ctx := context.Background()
	clk := newClock(t0)
	s := openStore(t, journal.WithClock(clk.Now))
	f := &incidentFixture{s: s, clk: clk, now: time.Now().UTC()}
	T := func(seconds float64) time.Time { return t0.Add(time.Duration(seconds * float64(time.Second))) }
	ev := func(tenant, bucket, scope, event string, at time.Time, client, reason string, counts map[string]int64) journal.FleetEvent {
		k := journal.FleetEvent{At: at, Tenant: tenant, Bucket: bucket, Scope: scope, Provider: "openai", Model: "gpt-4o",
			Event: event, ClientID: client, Reason: reason, Counts: counts}
		switch bucket {
		case "auth:openai@key-a":
			k.Model, k.KeyID = "", "key-a"
		case "rate_limit:openai/gpt-4o@key-a":
			k.KeyID = "key-a"
		case "availability:anthropic/claude":
			k.Provider, k.Model = "anthropic", "claude"
		}
		return k
	}
	av, auth := journal.FleetScopeAvailability, journal.FleetScopeAuth
	events := []journal.FleetEvent{
		// The outage: the breaker opens, a probe fails, it closes.
		ev("acme", bucketAv, av, journal.FleetBreakerOpen, T(0), "agent-2",
			"20 failures in 10s from 3 clients (last: OVERLOADED); open for 5s", map[string]int64{"open_ms": 5000}),
		ev("acme", bucketAv, av, journal.FleetShed, T(1), "agent-3", "clients' gates parked first attempts and did not admit others, sending some to a fallback",
			map[string]int64{"shed": 7, "parked": 4, "fell_back": 2}),
		ev("acme", bucketAv, av, journal.FleetBreakerHalfOpen, T(5), "", "open for 5s; probing", nil),
		ev("acme", bucketAv, av, journal.FleetBreakerOpen, T(6), "agent-1", "a OVERLOADED while half-open; open for 2s", map[string]int64{"open_ms": 2000}),
		ev("acme", bucketAv, av, journal.FleetShed, T(7), "agent-3", "clients' gates parked first attempts and did not admit others", map[string]int64{"shed": 5, "parked": 3}),
		ev("acme", bucketAv, av, journal.FleetBreakerHalfOpen, T(8), "", "open for 2s; probing", nil),
		ev("acme", bucketAv, av, journal.FleetBreakerClose, T(10), "", "2 successes reported while half-open", nil),
		ev("acme", bucketAv, av, journal.FleetSlowStart, T(10), "", "slow start", map[string]int64{"window_ms": 5000}),
		// Shed first attempts alone are no incident: the gates shed in every
		// bucket of a target while one is in trouble.
		ev("acme", "rate_limit:openai/gpt-4o@key-a", journal.FleetScopeRateLimit, journal.FleetShed, T(1), "agent-3",
			"clients' gates parked first attempts and did not admit others", map[string]int64{"shed": 7, "parked": 4}),
		// A tenant limit is about the tenant: no incident of its own.
		ev("acme", bucketAv, av, journal.FleetTenantLimit, T(100), "", "buckets", nil),
		// A long hold: 100 s between its events, but the first hold lasts 90 s.
		ev("acme", bucketAv, av, journal.FleetHoldSet, T(300), "agent-4", "a server asked to wait 1m30s", map[string]int64{"hold_ms": 90000}),
		ev("acme", bucketAv, av, journal.FleetHoldSet, T(400), "agent-5", "a server asked to wait 1m30s", map[string]int64{"hold_ms": 90000}),
		// A revoked key: nothing journaled, the type read off the reason.
		ev("acme", "auth:openai@key-a", auth, journal.FleetStop, T(0), "agent-9",
			`AUTH_INVALID on key "key-a": Fix the API credentials`, map[string]int64{"stop_ms": 60000}),
		// A 5-minute hold an operator cleared after 20 s.
		ev("acme", bucketAv, av, journal.FleetHoldSet, T(1000), "agent-6", "a server asked to wait 5m0s", map[string]int64{"hold_ms": 300000}),
		ev("acme", bucketAv, av, journal.FleetClear, T(1020), "", "an operator cleared the hold: the provider lifted it", nil),
		// A breaker whose daemon went away: no close, nothing for hours.
		ev("acme", "availability:anthropic/claude", av, journal.FleetBreakerOpen, T(3000), "agent-7",
			"20 failures in 10s from 3 clients (last: TIMEOUT); open for 5s", map[string]int64{"open_ms": 5000}),
		// Open now.
		ev("acme", "availability:anthropic/claude", av, journal.FleetBreakerOpen, f.now.Add(-30*time.Second), "agent-8",
			"20 failures in 10s from 3 clients (last: SERVER_ERROR); open for 5s", map[string]int64{"open_ms": 5000}),
		// Another tenant's outage of the same bucket, at the same time.
		ev("globex", bucketAv, av, journal.FleetBreakerOpen, T(0), "x-1", "20 failures", map[string]int64{"open_ms": 5000}),
	}
	wantErr(t, s.RecordFleetEvents(ctx, events), nil)

	// The journal. Twenty failures in the ten seconds before the breaker
	// opened, from three agents' contexts; then a retry held, a stop, a
	// fallback and a failed probe; two contexts resolve after the close.
	type att struct {
		at               float64
		failureType      string
		decision, reason string
		provider         string
	}
	contexts := map[string][]att{}
	for i := range 20 {
		agent := fmt.Sprintf("agent-%d", i%3+1)
		contexts[agent] = append(contexts[agent], att{at: -9.5 + float64(i)*0.5, failureType: "OVERLOADED", decision: journal.DecisionRetry})
	}
	contexts["agent-1"] = append(contexts["agent-1"], att{at: 2, failureType: "OVERLOADED", decision: journal.DecisionRetry},
		att{at: 7, failureType: "OVERLOADED", decision: journal.DecisionRetry})
	contexts["agent-2"] = append(contexts["agent-2"], att{at: 3, failureType: "OVERLOADED", decision: journal.DecisionStop, reason: "CIRCUIT_OPEN"})
	contexts["agent-3"] = append(contexts["agent-3"], att{at: 4, failureType: "SERVER_ERROR", decision: journal.DecisionFallBack, reason: "RETRY_BUDGET_EXHAUSTED"},
		// Not the bucket's: another scope, and a failure in upper-case provider spelling that is.
		att{at: 4.5, failureType: "INVALID_REQUEST", decision: journal.DecisionStop, reason: "NOT_RETRYABLE"},
		att{at: 4.6, failureType: "TIMEOUT", decision: journal.DecisionRetry, provider: "OpenAI"})
	for _, agent := range []string{"agent-1", "agent-2", "agent-3"} {
		c := begin(t, s, journal.Context{Tenant: "acme", Agent: agent, Provider: "openai", Model: "gpt-4o", StartedAt: T(-10)})
		if agent == "agent-1" {
			f.firstContext = c.ID
		}
		for i, a := range contexts[agent] {
			record(t, s, "acme", journal.Attempt{ContextID: c.ID, Attempt: i + 1, At: T(a.at), FailureType: a.failureType,
				Rule: "http.503", Decision: a.decision, StopReason: a.reason, Provider: a.provider})
		}
		if agent != "agent-2" {
			clk.Set(T(11))
			if _, _, err := s.FinishContext(ctx, "acme", c.ID, journal.OutcomeResolved); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Another tenant's failures in the same seconds count for it alone.
	g := begin(t, s, journal.Context{Tenant: "globex", Provider: "openai", Model: "gpt-4o", StartedAt: T(-10)})
	for i := range 5 {
		record(t, s, "globex", journal.Attempt{ContextID: g.ID, Attempt: i + 1, At: T(-5 + float64(i)), FailureType: "OVERLOADED"})
	}
	return f
}

// TestIncidents reads the incidents view back through ListIncidents and
// GetIncident: what each incident's events and the journal say, the
// separation of incidents, tenants and filters, and paging.
func TestIncidents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newIncidentFixture(t)
	s := f.s

	all, next, err := s.ListIncidents(ctx, "acme", journal.IncidentFilter{})
	wantErr(t, err, nil)
	if next != "" {
		t.Errorf("next page token = %q on a single page", next)
	}
	var lines []string
	for _, in := range all {
		lines = append(lines, fmt.Sprintf("%s +%v open=%v breaker=%q recovered=%v first=%s/%s/%q/%q",
			in.Bucket, in.StartedAt.Sub(t0), in.Open, in.BreakerState, recoveredAfter(in), in.FirstEvent,
			in.FirstClientID, in.FirstFailureType, in.FirstFailureRule))
	}
	openAt := f.now.Add(-30 * time.Second).Truncate(time.Microsecond).Sub(t0)
	want := []string{
		fmt.Sprintf(`availability:anthropic/claude +%v open=true breaker="open" recovered=- first=breaker_open/agent-8/"SERVER_ERROR"/""`, openAt),
		`availability:anthropic/claude +50m0s open=false breaker="open" recovered=- first=breaker_open/agent-7/"TIMEOUT"/""`,
		`availability:openai/gpt-4o +16m40s open=false breaker="" recovered=20s first=hold_set/agent-6/""/""`,
		`availability:openai/gpt-4o +5m0s open=false breaker="" recovered=3m10s first=hold_set/agent-4/""/""`,
		// Two incidents started at t0: the later id (the stop's) first.
		`auth:openai@key-a +0s open=false breaker="" recovered=1m0s first=fleet_stop/agent-9/"AUTH_INVALID"/""`,
		`availability:openai/gpt-4o +0s open=false breaker="closed" recovered=10s first=breaker_open/agent-2/"OVERLOADED"/"http.503"`,
	}
	if got := strings.Join(lines, "\n"); got != strings.Join(want, "\n") {
		t.Fatalf("incidents:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}

	// The outage, in numbers.
	var outage journal.Incident
	for _, in := range all {
		if in.Bucket == bucketAv && in.StartedAt.Equal(t0) {
			outage = in
		}
	}
	got := fmt.Sprintf("first failure %v in %v of %s; recovery %v; opens=%d events=%d shed=%d parked=%d gate_fell_back=%d failed=%d held=%d stopped=%d fell_back=%d baseline=%.1f/s avoided=%d",
		outage.FirstFailureAt.Sub(t0), outage.FirstFailureContextID == f.firstContext, outage.FirstFailureAgent, outage.Recovery, outage.BreakerOpens,
		outage.Events, outage.Shed, outage.Parked, outage.GateFellBack, outage.FailedAttempts, outage.RetriesHeld, outage.Stopped, outage.FellBack,
		outage.BaselinePerSecond, outage.RetriesAvoided)
	// Failures: 20 up to the opening, 5 after (the INVALID_REQUEST is not
	// the bucket's; "OpenAI" is). Held: the retries from the opening on
	// (the failure that opened it is held too). Avoided: 2/s over the 10 s
	// to the close, less the 5 sent. Parked and fallen back at the gates:
	// the shed events' counts (a count an event leaves out is 0).
	wantOutage := "first failure -9.5s in true of agent-1; recovery 19.5s; opens=2 events=8 shed=12 parked=7 gate_fell_back=2 failed=25 held=4 stopped=1 fell_back=1 baseline=2.0/s avoided=15"
	if got != wantOutage {
		t.Errorf("outage:\n%s\nwant:\n%s", got, wantOutage)
	}

	tests := []struct {
		name    string
		filter  journal.IncidentFilter
		buckets []string
	}{
		{"open only", journal.IncidentFilter{OpenOnly: true}, []string{"availability:anthropic/claude"}},
		{"bucket", journal.IncidentFilter{Bucket: "auth:openai@key-a"}, []string{"auth:openai@key-a"}},
		{"provider, any case", journal.IncidentFilter{Provider: "Anthropic"}, []string{"availability:anthropic/claude", "availability:anthropic/claude"}},
		{"model", journal.IncidentFilter{Model: "gpt-4o"}, []string{bucketAv, bucketAv, bucketAv}},
		{"since", journal.IncidentFilter{Since: t0.Add(18 * time.Minute)}, []string{"availability:anthropic/claude", "availability:anthropic/claude"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			list, _, err := s.ListIncidents(ctx, "acme", tt.filter)
			wantErr(t, err, nil)
			var got []string
			for _, in := range list {
				got = append(got, in.Bucket)
			}
			if strings.Join(got, " ") != strings.Join(tt.buckets, " ") {
				t.Errorf("buckets = %v, want %v", got, tt.buckets)
			}
		})
	}

	t.Run("pages", func(t *testing.T) {
		var ids []int64
		token := ""
		for page := 0; ; page++ {
			list, next, err := s.ListIncidents(ctx, "acme", journal.IncidentFilter{PageSize: 4, PageToken: token})
			wantErr(t, err, nil)
			for _, in := range list {
				ids = append(ids, in.ID)
			}
			if next == "" {
				break
			}
			if page > 2 {
				t.Fatal("more pages than incidents")
			}
			token = next
		}
		if len(ids) != len(all) {
			t.Fatalf("paged %d incidents, want %d", len(ids), len(all))
		}
		for i := range ids {
			if ids[i] != all[i].ID {
				t.Errorf("page order: incident %d is %d, want %d", i, ids[i], all[i].ID)
			}
		}
		_, _, err := s.ListIncidents(ctx, "acme", journal.IncidentFilter{PageToken: "bm90IGEgdG9rZW4"})
		var ie *journal.InvalidError
		if !errors.As(err, &ie) || ie.Field != "page_token" {
			t.Errorf("a forged page token: %v, want an invalid page_token", err)
		}
	})

	t.Run("tenants", func(t *testing.T) {
		list, _, err := s.ListIncidents(ctx, "globex", journal.IncidentFilter{})
		wantErr(t, err, nil)
		if len(list) != 1 || list[0].FailedAttempts != 5 || list[0].BaselinePerSecond != 0.5 {
			t.Fatalf("globex's incidents = %+v, want its one outage with its own 5 failures", list)
		}
		_, err = s.GetIncident(ctx, "acme", list[0].ID)
		wantErr(t, err, journal.ErrNotFound)
	})

	t.Run("timeline", func(t *testing.T) {
		d, err := s.GetIncident(ctx, "acme", outage.ID)
		wantErr(t, err, nil)
		if d.Incident != outage {
			t.Errorf("GetIncident's incident differs from ListIncidents':\n%+v\n%+v", d.Incident, outage)
		}
		var kinds []string
		for _, e := range d.Events {
			kinds = append(kinds, e.Event)
		}
		wantKinds := "breaker_open shed breaker_half_open breaker_open shed breaker_half_open breaker_close slow_start"
		if strings.Join(kinds, " ") != wantKinds {
			t.Errorf("events = %v, want %s", kinds, wantKinds)
		}
		// The incident's gate counts are what its shed events hold.
		var eventsShed, eventsParked, eventsFellBack int64
		for _, e := range d.Events {
			if e.Event == journal.FleetShed {
				eventsShed, eventsParked, eventsFellBack = eventsShed+e.Counts["shed"], eventsParked+e.Counts["parked"], eventsFellBack+e.Counts["fell_back"]
			}
		}
		if d.Shed != eventsShed || d.Parked != eventsParked || d.GateFellBack != eventsFellBack {
			t.Errorf("shed=%d parked=%d gate_fell_back=%d, want the shed events' %d, %d, %d",
				d.Shed, d.Parked, d.GateFellBack, eventsShed, eventsParked, eventsFellBack)
		}
		var failed, held, resolved, shed, parked int64
		states := map[string]bool{}
		for i, b := range d.Activity {
			failed, held, resolved, shed, parked = failed+b.Failed, held+b.RetriesHeld, resolved+b.Resolved, shed+b.Shed, parked+b.Parked
			states[b.Breaker] = true
			if i > 0 && !b.Start.Equal(d.Activity[i-1].Start.Add(b.Width)) {
				t.Errorf("bin %d starts at %v, want right after the one before", i, b.Start)
			}
		}
		if failed != 25 || held != 4 || resolved != 2 || shed != 12 || parked != eventsParked || parked == 0 {
			t.Errorf("activity: failed=%d held=%d resolved=%d shed=%d parked=%d, want 25, 4, 2, 12 and the events' %d parked",
				failed, held, resolved, shed, parked, eventsParked)
		}
		if !states["open"] || !states["half_open"] || d.Activity[len(d.Activity)-1].Breaker != "closed" {
			t.Errorf("breaker states over the timeline: %v, ending %q; want open, half-open, then closed", states, d.Activity[len(d.Activity)-1].Breaker)
		}
		if n := len(d.Activity); n < 20 || n > 61 {
			t.Errorf("%d bins, want one per second of the 29.5 s and the tail", n)
		}
		_, err = s.GetIncident(ctx, "acme", 1<<40)
		wantErr(t, err, journal.ErrNotFound)
	})
}

func recoveredAfter(in journal.Incident) string {
	if in.RecoveredAt.IsZero() {
		return "-"
	}
	return in.RecoveredAt.Sub(in.StartedAt).String()
}

// TestFailureScopeMatchesTheFleet checks the migration's
// fleet_failure_scope against the fleet's own mapping, for every failure
// type.
func TestFailureScopeMatchesTheFleet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, journaltest.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	for n := range policydv1.FailureType_name {
		ft := policydv1.FailureType(n)
		want := ""
		if sc, ok := fleet.ScopeOf(ft); ok {
			want = sc.String()
		}
		var got *string
		if err := conn.QueryRow(ctx, `SELECT fleet_failure_scope($1)`, enums.Short(ft)).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if (got == nil) != (want == "") || (got != nil && *got != want) {
			t.Errorf("fleet_failure_scope(%s) = %v, want %q", enums.Short(ft), got, want)
		}
	}
}
