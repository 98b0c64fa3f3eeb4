package fleet

import (
	"testing"
	"time"
)

func TestRequestsPerMinute(t *testing.T) {
	for _, c := range []struct {
		name, provider string
		headers        map[string]string
		want           int64
	}{
		// The header as OpenAI's rate-limit guide shows it.
		{"openai", "openai", map[string]string{"x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "59", "x-ratelimit-reset-requests": "1s"}, 60},
		{"openai any case", "OpenAI", map[string]string{"X-RateLimit-Limit-Requests": " 5000 "}, 5000},
		{"anthropic", "anthropic", map[string]string{"anthropic-ratelimit-requests-limit": "50", "anthropic-ratelimit-requests-reset": "2026-01-01T00:00:01Z"}, 50},
		{"groq per day", "groq", map[string]string{"x-ratelimit-limit-requests": "14400"}, 10},
		{"unknown provider", "mistral", map[string]string{"x-ratelimit-limit-requests": "60"}, 0},
		{"garbage", "openai", map[string]string{"x-ratelimit-limit-requests": "lots"}, 0},
		{"negative", "openai", map[string]string{"x-ratelimit-limit-requests": "-5"}, 0},
		{"absent", "openai", map[string]string{"x-ratelimit-remaining-requests": "5"}, 0},
	} {
		if got := ReadLimits(c.provider, c.headers, time.Time{}).RequestsPerMinute; got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

func TestRemainingShare(t *testing.T) {
	for _, c := range []struct {
		name, provider string
		headers        map[string]string
		want           float64
	}{
		{"openai", "openai", map[string]string{"x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "45"}, 0.75},
		{"anthropic", "anthropic", map[string]string{"anthropic-ratelimit-requests-limit": "50", "anthropic-ratelimit-requests-remaining": "0"}, 0},
		{"more left than the limit", "openai", map[string]string{"x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "90"}, 1},
		{"no remaining count", "openai", map[string]string{"x-ratelimit-limit-requests": "60"}, -1},
		{"no limit", "openai", map[string]string{"x-ratelimit-remaining-requests": "5"}, -1},
		{"garbage", "openai", map[string]string{"x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "some"}, -1},
		{"unknown provider", "mistral", map[string]string{"x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "5"}, -1},
		// The example in OpenAI's "Rate limits" guide: the tokens left are the lower share.
		{"tokens bind", "openai", map[string]string{"x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "59",
			"x-ratelimit-limit-tokens": "150000", "x-ratelimit-remaining-tokens": "30000"}, 0.2},
		{"input tokens alone", "anthropic", map[string]string{"anthropic-ratelimit-input-tokens-limit": "40000",
			"anthropic-ratelimit-input-tokens-remaining": "30000"}, 0.75},
	} {
		if got := ReadLimits(c.provider, c.headers, time.Time{}).RemainingShare; got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestInputTokensPerMinute(t *testing.T) {
	for _, c := range []struct {
		name, provider string
		headers        map[string]string
		want           int64
	}{
		{"openai", "openai", map[string]string{"x-ratelimit-limit-requests": "60", "x-ratelimit-limit-tokens": "150000"}, 150000},
		{"anthropic input tokens", "anthropic", map[string]string{"anthropic-ratelimit-tokens-limit": "48000",
			"anthropic-ratelimit-input-tokens-limit": "40000", "anthropic-ratelimit-output-tokens-limit": "8000"}, 40000},
		{"groq, any case", "Groq", map[string]string{"X-RateLimit-Limit-Tokens": "6000"}, 6000},
		{"no token limit", "openai", map[string]string{"x-ratelimit-limit-requests": "60"}, 0},
		{"garbage", "openai", map[string]string{"x-ratelimit-limit-tokens": "lots"}, 0},
		{"unknown provider", "mistral", map[string]string{"x-ratelimit-limit-tokens": "6000"}, 0},
	} {
		if got := ReadLimits(c.provider, c.headers, time.Time{}).InputTokensPerMinute; got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

func TestOutputTokensPerMinute(t *testing.T) {
	for _, c := range []struct {
		name, provider string
		headers        map[string]string
		want           int64
	}{
		{"anthropic", "anthropic", map[string]string{"anthropic-ratelimit-tokens-limit": "48000",
			"anthropic-ratelimit-input-tokens-limit": "40000", "anthropic-ratelimit-output-tokens-limit": "8000"}, 8000},
		{"anthropic, any case", "Anthropic", map[string]string{"Anthropic-RateLimit-Output-Tokens-Limit": " 16000 "}, 16000},
		// OpenAI's token limit counts input and output together: read as the input-token limit, not this one.
		{"openai has none", "openai", map[string]string{"x-ratelimit-limit-tokens": "150000"}, 0},
		{"garbage", "anthropic", map[string]string{"anthropic-ratelimit-output-tokens-limit": "lots"}, 0},
		{"unknown provider", "mistral", map[string]string{"anthropic-ratelimit-output-tokens-limit": "8000"}, 0},
	} {
		if got := ReadLimits(c.provider, c.headers, time.Time{}).OutputTokensPerMinute; got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
	// The output-token limit's remaining share counts among the limits'.
	l := ReadLimits("anthropic", map[string]string{"anthropic-ratelimit-input-tokens-limit": "40000",
		"anthropic-ratelimit-input-tokens-remaining": "30000", "anthropic-ratelimit-output-tokens-limit": "8000",
		"anthropic-ratelimit-output-tokens-remaining": "2000"}, time.Time{})
	if l.RemainingShare != 0.25 {
		t.Errorf("remaining share %v, want 0.25 (the output tokens left)", l.RemainingShare)
	}
}

func FuzzReadLimits(f *testing.F) {
	f.Add("openai", "x-ratelimit-limit-requests", "60", "x-ratelimit-reset-requests", "1s")
	f.Add("groq", "X-RATELIMIT-LIMIT-REQUESTS", "9223372036854775807", "x-ratelimit-remaining-tokens", "-3")
	f.Add("anthropic", "anthropic-ratelimit-input-tokens-reset", "2026-11-27T12:00:01Z", "anthropic-ratelimit-input-tokens-remaining", "7")
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, provider, name, value, name2, value2 string) {
		l := ReadLimits(provider, map[string]string{name: value, name2: value2}, now)
		if l.RequestsPerMinute < 0 || l.InputTokensPerMinute < 0 {
			t.Fatalf("negative limit %d, %d", l.RequestsPerMinute, l.InputTokensPerMinute)
		}
		if s := l.RemainingShare; s != -1 && (s < 0 || s > 1) {
			t.Fatalf("remaining share %v", s)
		}
		for _, left := range l.Left {
			if left.Remaining < -1 || left.Reset < 0 || left.Reset > maxReset {
				t.Fatalf("left %+v", left)
			}
		}
	})
}

func TestLeft(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	unknown := LimitLeft{Remaining: -1}
	for _, c := range []struct {
		name, provider string
		headers        map[string]string
		want           [3]LimitLeft
	}{
		// The example in OpenAI's "Rate limits" guide.
		{"openai", "openai", map[string]string{"x-ratelimit-remaining-requests": "59", "x-ratelimit-reset-requests": "1s",
			"x-ratelimit-remaining-tokens": "149984", "x-ratelimit-reset-tokens": "6m0s"},
			[3]LimitLeft{{59, time.Second}, {149984, 6 * time.Minute}, unknown}},
		{"anthropic, RFC 3339", "anthropic", map[string]string{"anthropic-ratelimit-requests-remaining": "49",
			"anthropic-ratelimit-requests-reset": "2026-11-27T12:00:03Z", "anthropic-ratelimit-input-tokens-remaining": "39000",
			"anthropic-ratelimit-input-tokens-reset": "2026-11-27T12:00:01Z"},
			[3]LimitLeft{{49, 3 * time.Second}, {39000, time.Second}, unknown}},
		// Anthropic's three limits, as its "Rate limits" page lists the headers.
		{"anthropic output tokens", "anthropic", map[string]string{"anthropic-ratelimit-requests-remaining": "49",
			"anthropic-ratelimit-input-tokens-remaining": "39000", "anthropic-ratelimit-output-tokens-remaining": "7200",
			"anthropic-ratelimit-output-tokens-reset": "2026-11-27T12:00:02Z"},
			[3]LimitLeft{{49, 0}, {39000, 0}, {7200, 2 * time.Second}}},
		{"a reset in the past or unreadable", "openai", map[string]string{"x-ratelimit-remaining-requests": "5",
			"x-ratelimit-reset-requests": "-1s", "x-ratelimit-remaining-tokens": "7", "x-ratelimit-reset-tokens": "soon"},
			[3]LimitLeft{{5, 0}, {7, 0}, unknown}},
		{"a reset beyond two days", "groq", map[string]string{"x-ratelimit-remaining-requests": "5", "x-ratelimit-reset-requests": "100h"},
			[3]LimitLeft{{5, 0}, unknown, unknown}},
		{"nothing said", "openai", nil, [3]LimitLeft{unknown, unknown, unknown}},
		{"unknown provider", "mistral", map[string]string{"x-ratelimit-remaining-requests": "5"}, [3]LimitLeft{unknown, unknown, unknown}},
	} {
		if got := ReadLimits(c.provider, c.headers, now).Left; got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
