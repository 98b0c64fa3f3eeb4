package journal_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/policyd/policyd/internal/journal"
	"github.com/policyd/policyd/internal/journal/journaltest"
)

// TestViews fills a journal with four contexts and checks every
// post-mortem view against what they must say.
func TestViews(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := journaltest.DatabaseURL(t)
	clk := newClock(t0)
	s := openStoreAt(t, url, journal.WithClock(clk.Now))

	at := func(hm string) time.Time {
		d, err := time.ParseDuration(strings.Replace(hm, ":", "h", 1) + "m")
		if err != nil {
			t.Fatal(err)
		}
		return t0.Truncate(24 * time.Hour).Add(d)
	}
	const (
		a = "00000000-0000-4000-8000-00000000000a"
		b = "00000000-0000-4000-8000-00000000000b"
		c = "00000000-0000-4000-8000-00000000000c"
		d = "00000000-0000-4000-8000-00000000000d"
	)
	type attempt struct {
		at, failureType, decision string
		delay                     time.Duration
		provider, model           string
	}
	for _, cx := range []struct {
		id, provider, model string
		start, finish       string
		outcome             journal.Outcome
		attempts            []attempt
	}{
		// Resolved after two rate limits.
		{a, "openai", "gpt-4o", "10:00", "10:00", journal.OutcomeResolved, []attempt{
			{"10:00", "RATE_LIMIT", "retry", time.Second, "", ""},
			{"10:00", "RATE_LIMIT", "retry", 2 * time.Second, "", ""}}},
		// Overloaded across an hour boundary, fell back to openai, failed there.
		{b, "anthropic", "claude", "10:30", "11:07", journal.OutcomeFailed, []attempt{
			{"10:30", "OVERLOADED", "retry", 5 * time.Second, "", ""},
			{"11:05", "OVERLOADED", "fall_back", 0, "anthropic", ""},
			{"11:06", "SERVER_ERROR", "stop", 0, "openai", "gpt-4o"}}},
		// Still running.
		{c, "openai", "gpt-4o", "11:10", "", journal.OutcomeInProgress, []attempt{
			{"11:10", "RATE_LIMIT", "retry", 4 * time.Second, "", ""}}},
		// Failed on bad credentials.
		{d, "openai", "gpt-4o", "11:20", "11:21", journal.OutcomeFailed, []attempt{
			{"11:20", "RATE_LIMIT", "retry", time.Second, "", ""},
			{"11:21", "AUTH_INVALID", "stop", 0, "", ""}}},
	} {
		begin(t, s, journal.Context{ID: cx.id, Tenant: "acme", Provider: cx.provider, Model: cx.model, StartedAt: at(cx.start)})
		for i, x := range cx.attempts {
			record(t, s, "acme", journal.Attempt{ContextID: cx.id, Attempt: i + 1, At: at(x.at), FailureType: x.failureType,
				Decision: x.decision, Delay: x.delay, Provider: x.provider, Model: x.model})
		}
		if cx.outcome != journal.OutcomeInProgress {
			clk.Set(at(cx.finish).Add(30 * time.Second))
			if _, _, err := s.FinishContext(ctx, "acme", cx.id, cx.outcome); err != nil {
				t.Fatal(err)
			}
		}
	}

	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	// Hours are UTC whatever the session's time zone (this one is +05:30).
	if _, err := conn.Exec(ctx, "SET TimeZone = 'Asia/Kolkata'"); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		view, query string
		want        []string
	}{
		{"journal_failures_per_hour", `SELECT to_char(hour AT TIME ZONE 'UTC', 'HH24:MI'), provider, model, failure_type, failures
			FROM journal_failures_per_hour WHERE tenant = 'acme' ORDER BY 1, 2, 4`, []string{
			"10:00 anthropic claude OVERLOADED 1",
			"10:00 openai gpt-4o RATE_LIMIT 2",
			"11:00 anthropic claude OVERLOADED 1",
			"11:00 openai gpt-4o AUTH_INVALID 1",
			"11:00 openai gpt-4o RATE_LIMIT 2",
			"11:00 openai gpt-4o SERVER_ERROR 1",
		}},
		{"journal_wait_per_context", `SELECT right(context_id::text, 1), outcome, attempt_count, total_wait_ms, coalesce(elapsed_ms, -1)
			FROM journal_wait_per_context WHERE tenant = 'acme' ORDER BY 1`, []string{
			"a resolved 2 3000 30000",
			"b failed 3 5000 2250000",
			"c in_progress 1 4000 -1",
			"d failed 2 1000 90000",
		}},
		{"journal_wait_per_provider", `SELECT provider, contexts, attempts, retries, total_wait_ms, max_wait_ms
			FROM journal_wait_per_provider WHERE tenant = 'acme' ORDER BY 1`, []string{
			"anthropic 1 2 1 5000 5000",
			"openai 4 6 4 8000 4000",
		}},
		{"journal_failed_contexts", `SELECT right(context_id::text, 1), provider, root_cause_type, unrecoverable, manual_action
			FROM journal_failed_contexts WHERE tenant = 'acme' ORDER BY 1`, []string{
			"b anthropic SERVER_ERROR false ",
			"d openai AUTH_INVALID true Fix the API credentials",
		}},
		{"journal_retry_success_rate", `SELECT failure_type, contexts, resolved, success_rate::text
			FROM journal_retry_success_rate WHERE tenant = 'acme' ORDER BY 1`, []string{
			"AUTH_INVALID 1 0 0.0000",
			"OVERLOADED 1 0 0.0000",
			"RATE_LIMIT 2 1 0.5000",
			"SERVER_ERROR 1 0 0.0000",
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

// queryLines runs query and returns each row as its values joined by spaces.
func queryLines(t *testing.T, conn *pgx.Conn, query string) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), query)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	lines, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		values, err := r.Values()
		if err != nil {
			return "", err
		}
		parts := make([]string, len(values))
		for i, v := range values {
			parts[i] = fmt.Sprint(v)
		}
		return strings.Join(parts, " "), nil
	})
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return lines
}
