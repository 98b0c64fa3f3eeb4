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

// RemainingShare reads how much of provider's request limit its headers
// say is left in the current window, in [0, 1]; -1 when they do not say
// (an unknown provider, no limit or no remaining count).
func RemainingShare(provider string, headers map[string]string) float64 {
	spec, ok := requestLimitHeaders[strings.ToLower(provider)]
	if !ok {
		return -1
	}
	limit, left := headerCount(headers, spec.header), headerCount(headers, spec.remaining)
	if limit <= 0 || left < 0 {
		return -1
	}
	return min(1, float64(left)/float64(limit))
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
