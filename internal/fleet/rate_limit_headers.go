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

// RequestsPerMinute reads provider's request limit from a success's
// rate-limit headers (names in any case), as requests a minute; 0 when the
// provider's headers are not known or carry no valid limit.
func RequestsPerMinute(provider string, headers map[string]string) int64 {
	spec, ok := requestLimitHeaders[strings.ToLower(provider)]
	if !ok {
		return 0
	}
	if n := headerCount(headers, spec.header); n > 0 {
		return max(n/spec.minutes, 1)
	}
	return 0
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

// InputTokensPerMinute reads provider's input-token limit from a
// response's rate-limit headers (names in any case), as tokens a minute; 0
// when the provider's headers are not known or carry no valid limit.
func InputTokensPerMinute(provider string, headers map[string]string) int64 {
	spec, ok := tokenLimitHeaders[strings.ToLower(provider)]
	if !ok {
		return 0
	}
	return max(headerCount(headers, spec.header), 0)
}

// RemainingShare reads how much of provider's limits its headers say is
// left in the current window, in [0, 1]: the least of the request and
// input-token limits' shares; -1 when they do not say (an unknown
// provider, no limit or no remaining count).
func RemainingShare(provider string, headers map[string]string) float64 {
	p := strings.ToLower(provider)
	share := -1.0
	for _, spec := range []struct{ header, remaining, reset string }{
		{requestLimitHeaders[p].header, requestLimitHeaders[p].remaining, ""}, tokenLimitHeaders[p],
	} {
		if spec.header == "" {
			continue
		}
		limit, left := headerCount(headers, spec.header), headerCount(headers, spec.remaining)
		if limit <= 0 || left < 0 {
			continue
		}
		if s := min(1, float64(left)/float64(limit)); share < 0 || s < share {
			share = s
		}
	}
	return share
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

// Left reads what provider's headers say is left of its request and
// input-token limits (in that order), at now: OpenAI and Groq give the
// reset as a duration ("6m0s"), Anthropic as an RFC 3339 time.
func Left(provider string, headers map[string]string, now time.Time) [2]LimitLeft {
	p := strings.ToLower(provider)
	out := [2]LimitLeft{{Remaining: -1}, {Remaining: -1}}
	for i, spec := range [2]struct{ remaining, reset string }{
		{requestLimitHeaders[p].remaining, requestLimitHeaders[p].reset},
		{tokenLimitHeaders[p].remaining, tokenLimitHeaders[p].reset},
	} {
		if spec.remaining == "" {
			continue
		}
		out[i].Remaining = headerCount(headers, spec.remaining)
		out[i].Reset = resetIn(headerValue(headers, spec.reset), now)
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

// headerValue is the value of header name (any case), or "".
func headerValue(headers map[string]string, name string) string {
	for k, v := range headers {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}

// headerCount is the non-negative integer header name holds (any case), or
// -1.
func headerCount(headers map[string]string, name string) int64 {
	v := strings.TrimSpace(headerValue(headers, name))
	if v == "" {
		return -1 // absent: no parse, and no error to allocate
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return -1
	}
	return n
}
