package fleet

import (
	"strconv"
	"strings"
	"time"
)

// requestLimitHeaders: per provider, the response header that gives its
// request limit and the window that limit is counted over, in minutes, as
// each provider documents it. OpenAI's x-ratelimit-limit-requests is
// requests per minute (platform.openai.com, "Rate limits": headers);
// Anthropic's anthropic-ratelimit-requests-limit is per minute
// (docs.anthropic.com, "Rate limits": response headers); Groq's
// x-ratelimit-limit-requests is requests per day (console.groq.com, "Rate
// limits": "always refers to Requests Per Day"). Other providers' headers
// are not read: a limit read over the wrong window would pace the fleet
// 60 or 1,440 times off.
var requestLimitHeaders = map[string]struct {
	header, remaining, reset string
	minutes                  int64
}{
	"openai":    {"x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests", 1},
	"anthropic": {"anthropic-ratelimit-requests-limit", "anthropic-ratelimit-requests-remaining", "anthropic-ratelimit-requests-reset", 1},
	"groq":      {"x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests", 24 * 60},
}

// tokenLimitHeaders: per provider, the response header that gives its
// input-token limit a minute, and the remaining count. OpenAI's
// x-ratelimit-limit-tokens counts a request's prompt and its max_tokens
// together (platform.openai.com, "Rate limits"): the fleet paces it on the
// clients' estimates of the prompt, and the 429s it still meets cut the
// pace. Anthropic's anthropic-ratelimit-input-tokens-limit is input tokens
// a minute (docs.anthropic.com, "Rate limits"); Groq's
// x-ratelimit-limit-tokens is tokens a minute (console.groq.com, "Rate
// limits").
var tokenLimitHeaders = map[string]struct{ header, remaining, reset string }{
	"openai":    {"x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"},
	"anthropic": {"anthropic-ratelimit-input-tokens-limit", "anthropic-ratelimit-input-tokens-remaining", "anthropic-ratelimit-input-tokens-reset"},
	"groq":      {"x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"},
}

// outputTokenLimitHeaders: per provider, the response header that gives
// its output-token limit a minute, and the remaining count. Only Anthropic
// sends one (anthropic-ratelimit-output-tokens-limit, docs.anthropic.com,
// "Rate limits": output tokens a minute, counted as the tokens generated).
// OpenAI's, Groq's and Cerebras's token headers count input and output
// together and are read as the input-token limit above.
var outputTokenLimitHeaders = map[string]struct{ header, remaining, reset string }{
	"anthropic": {"anthropic-ratelimit-output-tokens-limit", "anthropic-ratelimit-output-tokens-remaining", "anthropic-ratelimit-output-tokens-reset"},
}

// LimitLeft is what a response's headers said is left of one of a
// provider's limits, as the provider counts it, and how long until it is
// whole again.
type LimitLeft struct {
	Remaining int64         // -1: not said
	Reset     time.Duration // 0: not said
}

// maxReset bounds a reset time read from headers: the longest window
// read is Groq's day.
const maxReset = 48 * time.Hour

// Limits is what one response's rate-limit headers say of its provider's
// request, input-token and output-token limits, read in one pass over the
// headers.
type Limits struct {
	// RequestsPerMinute, InputTokensPerMinute and OutputTokensPerMinute are
	// the limits, a minute (0: not said, or the provider's headers are not
	// known).
	RequestsPerMinute, InputTokensPerMinute, OutputTokensPerMinute int64
	// RemainingShare is how much of the limits is left in the current
	// window, in [0, 1]: the least of the shares; -1 when the headers do
	// not say (no limit or no remaining count).
	RemainingShare float64
	// Left is what is left of the request, input-token and output-token
	// limits (in that order), as the provider counts it, and when it is
	// whole again.
	Left [3]LimitLeft
}

// ReadLimits reads provider's rate-limit headers (names in any case) at
// now. OpenAI and Groq give a reset as a duration ("6m0s"), Anthropic as an
// RFC 3339 time.
func ReadLimits(provider string, headers map[string]string, now time.Time) Limits {
	out := Limits{RemainingShare: -1, Left: [3]LimitLeft{{Remaining: -1}, {Remaining: -1}, {Remaining: -1}}}
	p := strings.ToLower(provider)
	rs, okR := requestLimitHeaders[p]
	ts, okT := tokenLimitHeaders[p]
	os, okO := outputTokenLimitHeaders[p]
	if !okR && !okT && !okO || len(headers) == 0 {
		return out
	}
	// The nine headers' values: limit, remaining and reset of requests,
	// then of input tokens, then of output tokens.
	names := [9]string{rs.header, rs.remaining, rs.reset, ts.header, ts.remaining, ts.reset, os.header, os.remaining, os.reset}
	var values [9]string
	for k, v := range headers {
		for i, name := range names {
			if name != "" && len(k) == len(name) && strings.EqualFold(k, name) {
				values[i] = v
			}
		}
	}
	if n := headerCount(values[0]); n > 0 {
		out.RequestsPerMinute = max(n/rs.minutes, 1)
	}
	out.InputTokensPerMinute = max(headerCount(values[3]), 0)
	out.OutputTokensPerMinute = max(headerCount(values[6]), 0)
	for i := range 3 {
		if names[3*i+1] == "" {
			continue
		}
		limit, left := headerCount(values[3*i]), headerCount(values[3*i+1])
		out.Left[i] = LimitLeft{Remaining: left, Reset: resetIn(values[3*i+2], now)}
		if limit <= 0 || left < 0 {
			continue
		}
		if s := min(1, float64(left)/float64(limit)); out.RemainingShare < 0 || s < out.RemainingShare {
			out.RemainingShare = s
		}
	}
	return out
}

// resetIn reads a reset header's value as a time from now (0: absent or
// not understood).
func resetIn(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t, terr := time.Parse(time.RFC3339, v)
		if terr != nil {
			return 0
		}
		d = t.Sub(now)
	}
	if d <= 0 || d > maxReset {
		return 0
	}
	return d
}

// headerCount is the non-negative integer a header's value v holds, or -1
// (absent, or not a count).
func headerCount(v string) int64 {
	v = strings.TrimSpace(v)
	if v == "" {
		return -1 // absent: no parse, and no error to allocate
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return -1
	}
	return n
}
