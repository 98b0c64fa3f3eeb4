package server

import (
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/policyd/policyd/internal/fleetevents"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/journal"
	"github.com/policyd/policyd/internal/journal/journaltest"
	"github.com/policyd/policyd/internal/policy"
)

// sqlBlock matches a fenced ```sql block of a Markdown page.
var sqlBlock = regexp.MustCompile("(?ms)^```sql\n(.*?)^```")

// Every query in docs/postmortem.md runs against a journal filled by real
// RPCs — the run the page describes — and finds it.
func TestPostmortemDocQueries(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/postmortem.md")
	if err != nil {
		t.Fatal(err)
	}
	queries := sqlBlock.FindAllStringSubmatch(string(doc), -1)
	if len(queries) < 5 {
		t.Fatalf("docs/postmortem.md has %d sql blocks, want one per question (at least 5)", len(queries))
	}

	url := journaltest.DatabaseURL(t)
	pc, jc, store := startJournaled(t, url)
	ctx := testContext(t)
	run := func(begin *policydv1.BeginContextRequest, outcome policydv1.Outcome, failures ...*policydv1.Failure) string {
		t.Helper()
		b, err := jc.BeginContext(ctx, begin)
		if err != nil {
			t.Fatal(err)
		}
		id := b.GetContext().GetContextId()
		for i, f := range failures {
			d, err := pc.NextDelay(ctx, &policydv1.NextDelayRequest{ContextId: id, Attempt: int32(i + 1), Profile: begin.GetProfile(), Failure: f})
			if err != nil || !d.GetDecision().GetJournaled() {
				t.Fatalf("NextDelay %d: %v journaled=%v", i+1, err, d.GetDecision().GetJournaled())
			}
		}
		if _, err := jc.FinishContext(ctx, &policydv1.FinishContextRequest{ContextId: id, Outcome: outcome}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	openai := func(status int32, headers map[string]string, body string) *policydv1.Failure {
		return &policydv1.Failure{Provider: "openai", Model: "gpt-4o", Operation: "chat", HttpStatus: status, Headers: headers, Body: body}
	}
	failed := run(&policydv1.BeginContextRequest{Agent: "demo-agent", Provider: "openai", Model: "gpt-4o", Operation: "chat"},
		policydv1.Outcome_OUTCOME_FAILED,
		openai(503, nil, `{"error":{"message":"The server is overloaded","type":"server_error"}}`),
		openai(429, map[string]string{"retry-after": "2"}, `{"error":{"message":"Rate limit reached for requests","code":"rate_limit_exceeded"}}`),
		openai(401, nil, `{"error":{"message":"Incorrect API key provided","code":"invalid_api_key"}}`))
	for range 2 {
		run(&policydv1.BeginContextRequest{Agent: "cli", Provider: "anthropic", Model: "claude-sonnet-4", Operation: "chat"},
			policydv1.Outcome_OUTCOME_RESOLVED,
			&policydv1.Failure{Provider: "anthropic", Model: "claude-sonnet-4", HttpStatus: 529,
				Body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`})
	}
	run(&policydv1.BeginContextRequest{Agent: "fetcher", Provider: "web", Operation: "web_fetch", Profile: "web_fetch"},
		policydv1.Outcome_OUTCOME_RESOLVED,
		&policydv1.Failure{Provider: "web", Operation: "web_fetch", Method: "GET", ErrorCode: "ECONNRESET", Message: "read ECONNRESET"})

	// A failure no rule recognises, twice in one context: the operator's
	// list of failures to teach policyd must show it, once.
	weird := &policydv1.Failure{Provider: "acme", Model: "acme-1", Operation: "chat", HttpStatus: 0,
		ErrorName: "WeirdError", Message: "the flux capacitor is out of sync"}
	cls, err := pc.Classify(ctx, &policydv1.ClassifyRequest{Failure: weird})
	if err != nil {
		t.Fatal(err)
	}
	if cls.GetClassification().GetFailureType() != policydv1.FailureType_FAILURE_TYPE_UNKNOWN {
		t.Fatalf("the unrecognised failure is classified %v (rule %q); pick one no rule recognises",
			cls.GetClassification().GetFailureType(), cls.GetClassification().GetRule())
	}
	run(&policydv1.BeginContextRequest{Agent: "cli", Provider: "acme", Model: "acme-1", Operation: "chat"},
		policydv1.Outcome_OUTCOME_ABANDONED, weird, weird)

	// An outage of openai/gpt-4o seen by three agents, through a server with
	// fleet memory journaling its events: twenty 503s open the breaker, and
	// the next retries fall back.
	events := store.FleetEventRecorder(journal.WithFleetBatch(1, 10*time.Millisecond))
	f := fleet.New(policy.Builtin().Fleet, fleet.WithClock(func() time.Time { return testNow }),
		fleet.WithSink(fleetevents.Sink(slog.New(slog.DiscardHandler), events, nil, "")))
	fleetSrv := serveTest(t, NewPolicyServer(policy.Builtin(), WithClock(func() time.Time { return testNow }),
		WithRand(fixedRand(0.5)), WithJournal(store, 2*time.Second), WithFleet(f)), nil)
	agents := newAgents(t, fleetSrv.addr) // three agents, three processes
	for i := range 24 {
		agent := []string{"agent-a", "agent-b", "agent-c"}[i%3]
		b, err := jc.BeginContext(ctx, &policydv1.BeginContextRequest{Agent: agent, Provider: "openai", Model: "gpt-4o", Operation: "chat"})
		if err != nil {
			t.Fatal(err)
		}
		d, err := agents.policy(agent).NextDelay(ctx, &policydv1.NextDelayRequest{ContextId: b.GetContext().GetContextId(), Attempt: 1, ClientId: agent,
			Failure: openai(503, nil, `{"error":{"message":"The server is overloaded or not ready yet.","type":"server_error"}}`)})
		if err != nil || !d.GetDecision().GetJournaled() {
			t.Fatalf("outage NextDelay %d: %v", i, err)
		}
	}
	events.Close() // flushed before the queries

	unrecognized, fleetQueries := 0, 0
	for _, q := range queries {
		sql := q[1]
		columns, rows := journaltest.Query(t, url, sql)
		if len(rows) == 0 {
			t.Errorf("no rows from a documented query over a filled journal:\n%s", sql)
			continue
		}
		if strings.Contains(sql, "journal_unrecognized_failures") {
			unrecognized++
			// Only the unrecognised failure, grouped: every other failure
			// of the run was recognised.
			want := map[string]string{"provider": "acme", "http_status": "0", "error_name": "WeirdError",
				"message_prefix": "the flux capacitor is out of sync", "failures": "2", "contexts": "1"}
			if len(rows) != 1 {
				t.Errorf("want one row (acme's WeirdError) from:\n%s\ngot %v", sql, rows)
			}
			for col, v := range want {
				i := slices.Index(columns, col)
				if i < 0 {
					t.Errorf("no column %s in:\n%s", col, sql)
					continue
				}
				if got := rows[0][i]; got != v {
					t.Errorf("%s = %q, want %q, from:\n%s", col, got, v, sql)
				}
			}
		}
		if strings.Contains(sql, "journal_fleet_") || strings.Contains(sql, "incident") {
			fleetQueries++
			if !slices.ContainsFunc(rows, func(r []string) bool {
				// gpt-4o's bucket, or (the events of its incident) its breaker's opening
				return slices.ContainsFunc(r, func(c string) bool { return strings.Contains(c, "gpt-4o") || c == "breaker_open" })
			}) {
				t.Errorf("the gpt-4o outage is missing from:\n%s\ngot %v", sql, rows)
			}
		}
		// The failed run is the one every question about failure must find.
		if slices.Contains(columns, "context_id") && strings.Contains(sql, "journal_failed_contexts") && !slices.ContainsFunc(rows, func(r []string) bool {
			return slices.Contains(r, failed) || slices.Contains(r, "AUTH_INVALID")
		}) {
			t.Errorf("the failed run %s is missing from:\n%s\ngot %v", failed, sql, rows)
		}
	}
	if fleetQueries < 7 {
		t.Errorf("docs/postmortem.md has %d queries of the fleet and incident views, want 7 (breaker periods, saved attempts, first failures; incidents, first failures, what policyd did, events)", fleetQueries)
	}
	if unrecognized == 0 {
		t.Error("docs/postmortem.md has no query of journal_unrecognized_failures")
	}
}
