package fleet

import "testing"

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
		if got := RequestsPerMinute(c.provider, c.headers); got != c.want {
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
	} {
		if got := RemainingShare(c.provider, c.headers); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func FuzzRequestsPerMinute(f *testing.F) {
	f.Add("openai", "x-ratelimit-limit-requests", "60")
	f.Add("groq", "X-RATELIMIT-LIMIT-REQUESTS", "9223372036854775807")
	f.Fuzz(func(t *testing.T, provider, name, value string) {
		if n := RequestsPerMinute(provider, map[string]string{name: value}); n < 0 {
			t.Fatalf("negative limit %d", n)
		}
	})
}
