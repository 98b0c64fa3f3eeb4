package classifier

import (
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		in     string
		want   time.Duration
		wantOK bool
	}{
		{"integer seconds", "7", 7 * time.Second, true},
		{"decimal seconds", "1.5", 1500 * time.Millisecond, true},
		{"spaces", "  30 ", 30 * time.Second, true},
		{"zero", "0", 0, true},
		{"IMF-fixdate", "Sun, 22 Nov 2026 12:01:00 GMT", time.Minute, true},
		{"RFC 850 date", "Sunday, 22-Nov-26 12:00:10 GMT", 10 * time.Second, true},
		{"asctime date", "Sun Nov 22 12:00:05 2026", 5 * time.Second, true},
		{"past date", "Sun, 22 Nov 2026 11:59:00 GMT", 0, true},
		{"empty", "", 0, false},
		{"negative", "-1", 0, false},
		{"word", "soon", 0, false},
		{"NaN", "NaN", 0, false},
		{"Inf", "+Inf", 0, false},
		{"too large to represent is the longest hint", "1e400", MaxDelayHint, true},
		{"more than a week is the longest hint", "700000", MaxDelayHint, true},
		{"2e299 seconds is the longest hint", "2e299", MaxDelayHint, true},
		{"bad date", "Sun, 99 Nov 2026 12:00:00 GMT", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := ParseRetryAfter(tc.in, testNow)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestParseMillisAndGoogleDuration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		parse  func(string) (time.Duration, bool)
		in     string
		want   time.Duration
		wantOK bool
	}{
		{"ms integer", ParseMillis, "1500", 1500 * time.Millisecond, true},
		{"ms decimal", ParseMillis, "2.5", 2500 * time.Microsecond, true},
		{"ms negative", ParseMillis, "-3", 0, false},
		{"ms garbage", ParseMillis, "12ms", 0, false},
		{"google 20s", ParseGoogleDuration, "20s", 20 * time.Second, true},
		{"google 1.5s", ParseGoogleDuration, "1.5s", 1500 * time.Millisecond, true},
		{"google 0.000001s", ParseGoogleDuration, "0.000001s", time.Microsecond, true},
		{"google no unit", ParseGoogleDuration, "20", 0, false},
		{"google minutes", ParseGoogleDuration, "1m", 0, false},
		{"google negative", ParseGoogleDuration, "-2s", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := tc.parse(tc.in)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("parse(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestParseRateLimitReset(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		in     string
		want   time.Duration
		wantOK bool
	}{
		{"go duration", "6m0s", 6 * time.Minute, true},
		{"go ms", "20ms", 20 * time.Millisecond, true},
		{"plain seconds", "12", 12 * time.Second, true},
		{"epoch seconds", "1795348860", time.Minute, true},
		{"epoch millis", "1795348801500", 1500 * time.Millisecond, true},
		{"epoch past", "1795348000", 0, true},
		{"rfc3339", "2026-11-22T12:00:30Z", 30 * time.Second, true},
		{"negative duration", "-5s", 0, false},
		{"garbage", "later", 0, false},
		{"NaN", "NaN", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := ParseRateLimitReset(tc.in, testNow)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("ParseRateLimitReset(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestParseDelayPhrase(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in     string
		want   time.Duration
		wantOK bool
	}{
		{"please retry in 20s.", 20 * time.Second, true},
		{"please retry in 20.5s.", 20500 * time.Millisecond, true},
		{"try again in 59 seconds.", 59 * time.Second, true},
		{"try again in 1 minute", time.Minute, true},
		{"try again in 2 hours", 2 * time.Hour, true},
		{"please try again in 350ms", 350 * time.Millisecond, true},
		{"retry after 3 sec", 3 * time.Second, true},
		{"try again in 1m30s", 90 * time.Second, true},
		{"try again in a moment. retry in 4s", 4 * time.Second, true},
		{"please try again later.", 0, false},
		{"retry in 5 fortnights", 0, false},
		{"retry in ", 0, false},
		{"retry in 99999999999 hours", MaxDelayHint, true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, ok := ParseDelayPhrase([]byte(tc.in))
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("ParseDelayPhrase(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestParseRetryAfterLenientDates(t *testing.T) {
	t.Parallel()
	now := time.Date(2019, 6, 3, 11, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"Mon, 3 Jun 2019 12:00:00 UTC":  time.Hour,
		"Mon, 03 Jun 2019 12:00:00 GMT": time.Hour,
		"Mon, 3 Jun 2019 11:30:00 GMT":  30 * time.Minute,
	} {
		if got, ok := ParseRetryAfter(v, now); !ok || got != want {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v", v, got, ok, want)
		}
	}
	if got, ok := ParseRetryAfter("Mon, 3 Jun 2019 12:00:00 PDT", now); ok {
		t.Errorf("a zone other than UTC or GMT: got %v, want no hint", got)
	}
}
