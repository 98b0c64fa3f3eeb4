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

// TestUnrecognizedFailuresView fills a journal through the writer with
// failures of known types and UNKNOWN ones, under two tenants, and checks
// that journal_unrecognized_failures groups only the ones no rule
// recognised (UNKNOWN, or answered by the learned fallback, which it counts
// as guessed), by tenant and by what a rule could match.
func TestUnrecognizedFailuresView(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := journaltest.DatabaseURL(t)
	s := openStoreAt(t, url)

	const (
		a = "00000000-0000-4000-8000-0000000000a1"
		b = "00000000-0000-4000-8000-0000000000b1"
		c = "00000000-0000-4000-8000-0000000000c1"
		g = "00000000-0000-4000-8000-0000000000e1" // another tenant's
	)
	flux := "the flux capacitor is out of sync"
	// Two messages that differ only after their first 80 characters.
	long := strings.Repeat("x", 80)
	for _, cx := range []struct{ id, tenant, provider string }{
		{a, "acme", "acme-ai"}, {b, "acme", "acme-ai"}, {c, "acme", "openai"}, {g, "globex", "acme-ai"},
	} {
		begin(t, s, journal.Context{ID: cx.id, Tenant: cx.tenant, Provider: cx.provider, StartedAt: t0})
	}
	for _, x := range []struct {
		tenant, id  string
		attempt     int
		at          time.Duration
		failureType string
		rule        string
		provider    string
		status      int
		name, code  string
		message     string
	}{
		// The same unrecognised failure, three times in two contexts; the
		// writer takes every spelling of the type.
		{"acme", a, 1, 1 * time.Minute, "UNKNOWN", "unknown", "", 0, "WeirdError", "", flux},
		{"acme", a, 2, 2 * time.Minute, "FAILURE_TYPE_UNKNOWN", "unknown", "", 0, "WeirdError", "", flux},
		{"acme", b, 1, 3 * time.Minute, "unknown", "unknown", "acme-ai", 0, "WeirdError", "", flux},
		// Another error name is another row, however alike the rest.
		{"acme", b, 2, 4 * time.Minute, "UNKNOWN", "unknown", "", 0, "OddError", "", flux},
		// Messages alike in their first 80 characters are one row; the
		// learned fallback's guess is in it, counted as guessed.
		{"acme", c, 1, 5 * time.Minute, "UNKNOWN", "unknown", "", 418, "", "E_TEAPOT", long + "1"},
		{"acme", c, 2, 6 * time.Minute, "OVERLOADED", "learned", "", 418, "", "E_TEAPOT", long + "2"},
		// Recognised failures are not in the view.
		{"acme", a, 3, 7 * time.Minute, "RATE_LIMIT", "rate_limit", "", 429, "RateLimitError", "rate_limit_exceeded", "Rate limit reached"},
		{"acme", c, 3, 8 * time.Minute, "SERVER_ERROR", "server_error", "", 0, "WeirdError", "", flux},
		// Another tenant's identical failure never mixes with acme's.
		{"globex", g, 1, 9 * time.Minute, "UNKNOWN", "unknown", "", 0, "WeirdError", "", flux},
	} {
		record(t, s, x.tenant, journal.Attempt{ContextID: x.id, Attempt: x.attempt, At: t0.Add(x.at), FailureType: x.failureType, Rule: x.rule,
			Provider: x.provider, HTTPStatus: x.status, ErrorName: x.name, ErrorCode: x.code, Message: x.message,
			Decision: journal.DecisionRetry, Delay: time.Second})
	}

	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	got := queryLines(t, conn, `SELECT tenant, provider, http_status, coalesce(nullif(error_name, ''), '-'),
			coalesce(nullif(error_code, ''), '-'), char_length(message_prefix), failures, contexts,
			to_char(first_seen AT TIME ZONE 'UTC', 'HH24:MI'), to_char(last_seen AT TIME ZONE 'UTC', 'HH24:MI'), guessed
		FROM journal_unrecognized_failures ORDER BY failures DESC, tenant, error_name`)
	want := []string{
		"acme acme-ai 0 WeirdError - 33 3 2 10:01 10:03 0",
		"acme openai 418 - E_TEAPOT 80 2 1 10:05 10:06 1",
		"acme acme-ai 0 OddError - 33 1 1 10:04 10:04 0",
		"globex acme-ai 0 WeirdError - 33 1 1 10:09 10:09 0",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("journal_unrecognized_failures:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var prefix string
	if err := conn.QueryRow(ctx, `SELECT message_prefix FROM journal_unrecognized_failures
		WHERE tenant = 'acme' AND error_name = 'WeirdError'`).Scan(&prefix); err != nil {
		t.Fatal(err)
	}
	if prefix != flux {
		t.Errorf("message_prefix = %q, want %q", prefix, flux)
	}
}
