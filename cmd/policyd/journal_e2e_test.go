package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/policyd/policyd/internal/journal/journaltest"
)

// grpcurlBinary finds grpcurl on PATH or in the repository's .bin, where
// `make tools` (and `make test`) install it.
func grpcurlBinary(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("grpcurl"); err == nil {
		return p
	}
	p, err := filepath.Abs("../../.bin/grpcurl")
	if err == nil {
		if _, err = os.Stat(p); err == nil {
			return p
		}
	}
	t.Skip("grpcurl is not installed: run 'make tools' (make test installs it)")
	return ""
}

// The "done when" of the journal: a daemon serving with --database-url on an
// empty database migrates it, and a failing run recorded through grpcurl
// (scripts/failing-run.sh) shows up in GetErrorReport and in the views.
func TestServeJournalFailingRunE2E(t *testing.T) {
	t.Parallel()
	grpcurl := grpcurlBinary(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	url := journaltest.EmptyDatabaseURL(t)
	d := startDaemon(t, ctx, "--database-url", url)

	cmd := exec.CommandContext(ctx, "bash", "../../scripts/failing-run.sh", d.addr, url)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(grpcurl)+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("failing-run.sh: %v\n%s\ndaemon:\n%s", err, out, d.logs.String())
	}
	m := regexp.MustCompile(`(?m)^context_id=([0-9a-f-]{36})$`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("failing-run.sh printed no context_id:\n%s", out)
	}
	id := string(m[1])
	for _, want := range []string{
		`"journaled": true`,
		`Root cause: AUTH_INVALID (rule auth.invalid)`,
		`Recovery: Fix the API credentials`,
		`Unrecoverable: yes`,
		`#2  `,
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("failing-run.sh output lacks %q:\n%s", want, out)
		}
	}
	// The report's text is printed as the block it is, not an escaped JSON string.
	for _, want := range []string{`(?m)^Root cause: AUTH_INVALID \(rule auth\.invalid\)$`, `(?m)^Attempts:$`,
		`(?m)^  #3  \S+  AUTH_INVALID  401  stop \(NOT_RETRYABLE\)$`, `(?m)^  \{"error":\{"message":"Incorrect API key provided"`} {
		if !regexp.MustCompile(want).Match(out) {
			t.Errorf("failing-run.sh output lacks a line matching %s:\n%s", want, out)
		}
	}
	// retry-after: 2, +10 % and up to 10 % of jitter: 2.2 to 2.4 s.
	if !regexp.MustCompile(`RATE_LIMIT    429  retry in 2\.[234]\d*s`).Match(out) {
		t.Errorf("failing-run.sh output lacks the 429 retried after 2.2-2.4s:\n%s", out)
	}
	_, rows := journaltest.Query(t, url, `SELECT root_cause_type, attempt_count, total_wait_ms FROM journal_failed_contexts WHERE context_id = $1`, id)
	if len(rows) != 1 || rows[0][0] != "AUTH_INVALID" || rows[0][1] != "3" {
		t.Errorf("journal_failed_contexts for %s = %v, want one AUTH_INVALID row after 3 attempts", id, rows)
	}
	_, rows = journaltest.Query(t, url, `SELECT provider, attempts, retries FROM journal_wait_per_provider`)
	if len(rows) != 1 || strings.Join(rows[0], " ") != "openai 3 2" {
		t.Errorf("journal_wait_per_provider = %v, want openai with 3 attempts, 2 retries", rows)
	}
}

// policyd migrate applies the migrations to an empty database, and again is
// a no-op; prune deletes by age and names its flag when the age is bad.
func TestMigrateAndPruneCommandsE2E(t *testing.T) {
	t.Parallel()
	bin := policydBinary(t)
	url := journaltest.EmptyDatabaseURL(t)
	runCommand(t, bin, "", []string{"migrate", "--database-url", url}, 0, "is up to date", "")
	runCommand(t, bin, "", []string{"migrate", "--database-url", url}, 0, "is up to date", "")
	_, rows := journaltest.Query(t, url, `SELECT count(*) FROM information_schema.views WHERE table_name LIKE 'journal_%'`)
	if rows[0][0] != "10" {
		t.Errorf("after migrate, %s journal views, want 10", rows[0][0])
	}
	if _, err := exec.Command(bin, "prune", "--database-url", url, "--older-than", "30d").CombinedOutput(); err != nil {
		t.Fatalf("prune --older-than 30d: %v", err)
	}
	runCommand(t, bin, "", []string{"prune", "--database-url", url, "--older-than", "soon"}, 2, "", "--older-than")
	runCommand(t, bin, "", []string{"prune", "--database-url", url}, 2, "", "--older-than")
	runCommand(t, bin, "", []string{"migrate"}, 2, "", "--database-url")
}

// --journal-message-chars bounds the stored message: a daemon keeping 64
// characters stores a 200-character message cut to 64; a value out of range
// (or of --journal-copy-min-rows) is refused naming the flag.
func TestServeJournalMessageCharsE2E(t *testing.T) {
	t.Parallel()
	bin := policydBinary(t)
	runCommand(t, bin, "", []string{"serve", "--listen", "127.0.0.1:0", "--database-url", "postgres://127.0.0.1:1/none",
		"--journal-message-chars", "10"}, 2, "", "--journal-message-chars")
	runCommand(t, bin, "", []string{"serve", "--listen", "127.0.0.1:0", "--database-url", "postgres://127.0.0.1:1/none",
		"--journal-copy-min-rows", "-1"}, 2, "", "--journal-copy-min-rows")

	grpcurl := grpcurlBinary(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	url := journaltest.EmptyDatabaseURL(t)
	d := startDaemon(t, ctx, "--database-url", url, "--journal-message-chars", "64")
	const id = "0193a4c2-7d1e-7f00-8a4b-3c2d1e0f9a8b"
	req := `{"context_id":"` + id + `","attempt":1,"failure":{"provider":"openai","http_status":503,"message":"` +
		strings.Repeat("overloaded ", 20) + `"}}`
	out, err := exec.CommandContext(ctx, grpcurl, "-plaintext", "-d", req, d.addr, "policyd.v1.PolicyService/NextDelay").CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"journaled": true`) {
		t.Fatalf("NextDelay: %v\n%s\ndaemon:\n%s", err, out, d.logs.String())
	}
	_, rows := journaltest.Query(t, url, `SELECT char_length(message), right(message, 1) FROM retry_attempts WHERE context_id = $1`, id)
	if len(rows) != 1 || rows[0][0] != "64" || rows[0][1] != "…" {
		t.Errorf("stored message (length, last character) = %v, want 64 characters ending in …", rows)
	}
}
