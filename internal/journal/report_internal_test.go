package journal

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// testTypeText stands in for the rules data (the server installs the real
// one; internal/server checks the wiring against it).
var testTypeText = map[string]TypeText{
	"AUTH_INVALID":      {"Fix the API credentials; retrying will not help.", "Fix the API credentials"},
	"QUOTA_EXHAUSTED":   {"Add credits or raise the quota; retrying will not help.", "Add credits or raise the quota"},
	"CONTEXT_TOO_LONG":  {"Reduce the input size.", "Reduce the input or configure a larger-context model"},
	"RATE_LIMIT":        {"Wait for the rate limit to reset.", ""},
	"PERMISSION_DENIED": {"Request access.", "Request access to the resource"},
}

func typeTextOf(ft string) TypeText { return testTypeText[ft] }

func TestBuildReportUnrecoverable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name              string
		last              Attempt
		wantUnrecoverable bool
		wantManual        string
		wantRecovery      string
	}{
		{"auth", Attempt{FailureType: "AUTH_INVALID"}, true, "Fix the API credentials", testTypeText["AUTH_INVALID"].Recovery},
		{"quota", Attempt{FailureType: "QUOTA_EXHAUSTED", RecoveryAction: "Add credits."}, true, "Add credits or raise the quota", "Add credits."},
		{"permission", Attempt{FailureType: "PERMISSION_DENIED"}, true, "Request access to the resource", "Request access."},
		{"context too long, stopped", Attempt{FailureType: "CONTEXT_TOO_LONG", Decision: DecisionStop}, true,
			"Reduce the input or configure a larger-context model", "Reduce the input size."},
		{"context too long, fell back", Attempt{FailureType: "CONTEXT_TOO_LONG", Decision: DecisionFallBack}, false, "", "Reduce the input size."},
		{"rate limit", Attempt{FailureType: "RATE_LIMIT"}, false, "", "Wait for the rate limit to reset."},
		{"server error", Attempt{FailureType: "SERVER_ERROR", RecoveryAction: "Retry."}, false, "", "Retry."},
		{"unknown type", Attempt{FailureType: "MARTIAN"}, false, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			first := Attempt{Attempt: 1, FailureType: "AUTH_INVALID"} // only the last attempt counts
			tt.last.Attempt = 2
			r := buildReport(Context{ID: "x", Outcome: OutcomeFailed}, []Attempt{first, tt.last}, time.Time{}, typeTextOf)
			if r.Unrecoverable != tt.wantUnrecoverable || r.ManualAction != tt.wantManual || r.RecoveryAction != tt.wantRecovery {
				t.Errorf("unrecoverable %v, manual %q, recovery %q; want %v, %q, %q",
					r.Unrecoverable, r.ManualAction, r.RecoveryAction, tt.wantUnrecoverable, tt.wantManual, tt.wantRecovery)
			}
			if r.RootCauseType != tt.last.FailureType {
				t.Errorf("root cause %q, want the last attempt's %q", r.RootCauseType, tt.last.FailureType)
			}
		})
	}
}

func TestReportTextBounded(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", maxTextLen)
	var attempts []Attempt
	for n := 1; n <= MaxAttempt; n++ {
		attempts = append(attempts, Attempt{Attempt: n, FailureType: strings.Repeat("T", maxNameLen),
			ErrorCode: strings.Repeat("c", maxNameLen), Decision: DecisionStop, StopReason: long, Delay: time.Second})
	}
	r := buildReport(Context{ID: "x", Outcome: OutcomeFailed}, attempts, time.Time{}, typeTextOf)
	if n := utf8.RuneCountInString(r.Text); n > maxReportLen {
		t.Fatalf("report text has %d characters, want at most %d", n, maxReportLen)
	}
	if !strings.Contains(r.Text, "#1 ") || !strings.Contains(r.Text, "… 800 attempts omitted …") {
		t.Fatalf("report text does not show the first attempts and the omission:\n%.2000s", r.Text)
	}
	// Without such long lines the last attempts and the total show too.
	for i := range attempts {
		attempts[i].StopReason, attempts[i].FailureType, attempts[i].ErrorCode = "not_retryable", "RATE_LIMIT", ""
	}
	r = buildReport(Context{ID: "x", Outcome: OutcomeFailed}, attempts, time.Time{}, typeTextOf)
	if !strings.Contains(r.Text, "#1000 ") || !strings.Contains(r.Text, "Total wait: 16m40s") {
		t.Fatalf("report text lacks the last attempt or the total:\n%s", r.Text[len(r.Text)-500:])
	}
}

func TestClip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		max      int
		want     string
	}{
		{"short", "abc", 5, "abc"},
		{"exact", "abcde", 5, "abcde"},
		{"cut", "abcdef", 5, "abcd…"},
		{"runes", "ééééééé", 3, "éé…"},
		{"invalid UTF-8", "a\xffb", 5, "a\uFFFDb"},
		{"NUL", "a\x00b", 5, "ab"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := clip(tt.in, tt.max); got != tt.want {
				t.Errorf("clip(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
			}
		})
	}
}
