package journal_test

import (
	"context"
	"testing"
	"time"

	"github.com/policyd/policyd/internal/journal"
)

// TestErrorReport fails a context after three attempts and compares the
// report, text included, with what it must be.
func TestErrorReport(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := newClock(t0)
	s := openStore(t, journal.WithClock(clk.Now))
	const id = "6f1c2d3e-4b5a-4c7d-8e9f-0a1b2c3d4e5f"
	begin(t, s, journal.Context{ID: id, Tenant: "acme", Agent: "coder", Provider: "openai", Model: "gpt-4o",
		Operation: "chat", Profile: "default"})
	attempts := []journal.Attempt{
		{ContextID: id, Attempt: 1, At: t0.Add(200 * time.Millisecond), Duration: 180 * time.Millisecond,
			FailureType: "RATE_LIMIT", Retryable: true, Rule: "openai.rate_limit", HTTPStatus: 429,
			ErrorCode: "rate_limit_exceeded", Message: "Rate limit reached for gpt-4o on requests per min (RPM).",
			RecoveryAction: "Wait and retry with backoff, honouring the server's delay.",
			Decision:       journal.DecisionRetry, Delay: 1500 * time.Millisecond, Strategy: "exponential"},
		{ContextID: id, Attempt: 2, At: t0.Add(1900 * time.Millisecond), FailureType: "OVERLOADED", Retryable: true,
			Rule: "status.503", HTTPStatus: 503, Message: "The engine is currently overloaded.",
			Decision: journal.DecisionFallBack, Fallback: "other_provider"},
		{ContextID: id, Attempt: 3, At: t0.Add(2500 * time.Millisecond), FailureType: "QUOTA_EXHAUSTED",
			Rule: "quota.exhausted", HTTPStatus: 429, ErrorCode: "insufficient_quota",
			Message:        "You exceeded your current quota,\n please check your plan and billing details.",
			RecoveryAction: "Add credits or upgrade the plan; retrying will not help.",
			Decision:       journal.DecisionStop, StopReason: "not_retryable", Provider: "openrouter", Model: "gpt-4o"},
	}
	for _, a := range attempts {
		record(t, s, "acme", a)
	}
	clk.Set(t0.Add(2600 * time.Millisecond))
	_, report, err := s.FinishContext(ctx, "acme", id, journal.OutcomeFailed)
	wantErr(t, err, nil)

	const wantText = `Error report for retry context 6f1c2d3e-4b5a-4c7d-8e9f-0a1b2c3d4e5f
Tenant: acme · Agent: coder · Operation: chat · Profile: default
Provider: openai · Model: gpt-4o
Started 2026-03-01T10:00:00.000Z, finished 2026-03-01T10:00:02.600Z (after 2.6s); failed after 3 attempts

Root cause: QUOTA_EXHAUSTED (rule quota.exhausted)
  You exceeded your current quota, please check your plan and billing details.
Recovery: Add credits or upgrade the plan; retrying will not help.
Unrecoverable: yes. Manual action required: Add credits or raise the quota.

Attempts:
  #1  2026-03-01T10:00:00.200Z  RATE_LIMIT       429 rate_limit_exceeded  retry in 1.5s
  #2  2026-03-01T10:00:01.900Z  OVERLOADED       503                      fall back to other_provider
  #3  2026-03-01T10:00:02.500Z  QUOTA_EXHAUSTED  429 insufficient_quota   stop (not_retryable)  [openrouter/gpt-4o]
Total wait: 1.5s
`
	if report.Text != wantText {
		t.Errorf("report text:\n%s\nwant:\n%s", report.Text, wantText)
	}
	want := journal.Report{ContextID: id, RootCauseType: "QUOTA_EXHAUSTED", RootCauseRule: "quota.exhausted",
		RootCauseMessage: attempts[2].Message, RecoveryAction: "Add credits or upgrade the plan; retrying will not help.",
		Unrecoverable: true, ManualAction: "Add credits or raise the quota", Text: wantText,
		CreatedAt: t0.Add(2600 * time.Millisecond)}
	stored, err := s.GetErrorReport(ctx, "acme", id)
	wantErr(t, err, nil)
	for _, got := range []journal.Report{*report, stored} {
		if len(got.Attempts) != 3 {
			t.Fatalf("report has %d attempts, want 3", len(got.Attempts))
		}
		got.Attempts = nil
		if got.ContextID != want.ContextID || got.RootCauseType != want.RootCauseType || got.RootCauseRule != want.RootCauseRule ||
			got.RootCauseMessage != want.RootCauseMessage || got.RecoveryAction != want.RecoveryAction ||
			got.Unrecoverable != want.Unrecoverable || got.ManualAction != want.ManualAction || got.Text != want.Text ||
			!got.CreatedAt.Equal(want.CreatedAt) {
			t.Errorf("report = %+v\nwant %+v", got, want)
		}
	}

	// A late attempt does not change the written report.
	record(t, s, "acme", journal.Attempt{ContextID: id, Attempt: 4, FailureType: "AUTH_INVALID"})
	stored, err = s.GetErrorReport(ctx, "acme", id)
	wantErr(t, err, nil)
	if len(stored.Attempts) != 3 || stored.Text != wantText {
		t.Errorf("report after a late attempt has %d attempts, text changed: %v", len(stored.Attempts), stored.Text != wantText)
	}
	_, err = s.GetErrorReport(ctx, "other", id)
	wantErr(t, err, journal.ErrNotFound)
}

func TestErrorReportWithoutAttempts(t *testing.T) {
	t.Parallel()
	clk := newClock(t0)
	s := openStore(t, journal.WithClock(clk.Now))
	const id = "00000000-0000-4000-8000-000000000001"
	begin(t, s, journal.Context{ID: id})
	_, report, err := s.FinishContext(context.Background(), "", id, journal.OutcomeFailed)
	wantErr(t, err, nil)
	const wantText = `Error report for retry context 00000000-0000-4000-8000-000000000001
Started 2026-03-01T10:00:00.000Z, finished 2026-03-01T10:00:00.000Z (after 0s); failed after 0 attempts

Root cause: unknown (no attempts were recorded)
Unrecoverable: no

Attempts:
  (none recorded)
Total wait: 0s
`
	if report.Text != wantText || report.Unrecoverable || report.RootCauseType != "" {
		t.Errorf("report = %+v, text:\n%s\nwant:\n%s", report, report.Text, wantText)
	}
}
