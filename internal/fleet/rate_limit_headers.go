package fleet

import (
	"strconv"
	"strings"
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
	header, remaining string
	minutes           int64
}{
	"openai":    {"x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", 1},
	"anthropic": {"anthropic-ratelimit-requests-limit", "anthropic-ratelimit-requests-remaining", 1},
	"groq":      {"x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", 24 * 60},
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
var tokenLimitHeaders = map[string]struct{ header, remaining string }{
	"openai":    {"x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens"},
	"anthropic": {"anthropic-ratelimit-input-tokens-limit", "anthropic-ratelimit-input-tokens-remaining"},
	"groq":      {"x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens"},
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
	for _, spec := range []struct{ header, remaining string }{
		{requestLimitHeaders[p].header, requestLimitHeaders[p].remaining}, tokenLimitHeaders[p],
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

// headerCount is the non-negative integer header name holds (any case), or
// -1.
func headerCount(headers map[string]string, name string) int64 {
	for k, v := range headers {
		if !strings.EqualFold(k, name) {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n < 0 {
			return -1
		}
		return n
	}
	return -1
}
