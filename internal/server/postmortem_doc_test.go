package server

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/journal/journaltest"
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
	pc, jc, _ := startJournaled(t, url)
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

	for _, q := range queries {
		sql := q[1]
		columns, rows := journaltest.Query(t, url, sql)
		if len(rows) == 0 {
			t.Errorf("no rows from a documented query over a filled journal:\n%s", sql)
			continue
		}
		// The failed run is the one every question about failure must find.
		if slices.Contains(columns, "context_id") && strings.Contains(sql, "journal_failed_contexts") && !slices.ContainsFunc(rows, func(r []string) bool {
			return slices.Contains(r, failed) || slices.Contains(r, "AUTH_INVALID")
		}) {
			t.Errorf("the failed run %s is missing from:\n%s\ngot %v", failed, sql, rows)
		}
	}
}
