package strategy

import (
	"testing"
	"time"
)

// Where good clients differ on a delay hint, the strategy says which
// convention it follows.
func TestPeerConventionsForHints(t *testing.T) {
	t.Parallel()
	base := Strategy{Retry: true, MaxAttempts: 3, Backoff: BackoffExponential, InitialDelay: 500 * time.Millisecond,
		MaxDelay: 8 * time.Second, HonorRetryAfter: true, RetryAfterCeiling: 60 * time.Second}
	hint := func(d time.Duration) Input {
		in := retryIn(1)
		in.RetryAfter, in.HasRetryAfter = d, true
		return in
	}
	tests := []struct {
		name   string
		edit   func(*Strategy)
		in     Input
		action Action
		delay  time.Duration
	}{
		{"a zero hint is no hint by default: the backoff", func(*Strategy) {}, hint(0), ActionRetry, 500 * time.Millisecond},
		{"a zero hint means now (openai-go, openai-node)", func(s *Strategy) { s.RetryAfterZero = RetryAfterZeroNow }, hint(0), ActionRetry, 0},
		{"retry_after_zero: now leaves positive hints alone", func(s *Strategy) { s.RetryAfterZero = RetryAfterZeroNow }, hint(2 * time.Second), ActionRetry, 2 * time.Second},
		{"retry_after_zero: now needs honor_retry_after", func(s *Strategy) { s.RetryAfterZero, s.HonorRetryAfter = RetryAfterZeroNow, false }, hint(0), ActionRetry, 500 * time.Millisecond},
		{"above the ceiling, ignore waits the backoff", func(s *Strategy) { s.AboveCeiling = mustAbove(t, "ignore") }, hint(time.Hour), ActionRetry, 500 * time.Millisecond},
		{"above the ceiling, stop with a fallback falls back", func(s *Strategy) { s.Fallback = FallbackOtherProvider }, hint(time.Hour), ActionFallBack, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := base
			tc.edit(&s)
			d := s.Decide(tc.in, nil)
			if d.Action != tc.action || d.Delay != tc.delay {
				t.Errorf("got %v after %v, want %v after %v", d.Action, d.Delay, tc.action, tc.delay)
			}
		})
	}
}

func mustAbove(t *testing.T, s string) AboveCeiling {
	t.Helper()
	a, err := ParseAboveCeiling(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestParseRetryAfterZero(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]RetryAfterZero{"now": RetryAfterZeroNow, "backoff": RetryAfterZeroBackoff, "no_hint": RetryAfterZeroBackoff} {
		if got, err := ParseRetryAfterZero(in); err != nil || got != want {
			t.Errorf("ParseRetryAfterZero(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseRetryAfterZero("soon"); err == nil {
		t.Error(`ParseRetryAfterZero("soon") = nil error`)
	}
}
