package policyd

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxHint bounds a server delay hint; larger ones are ignored, as policyd
// ignores them.
const maxHint = 7 * 24 * time.Hour

// RetryAfter returns the server's delay hint in headers (names in lower
// case, as in Failure.Headers), from the most precise source present:
// retry-after-ms (milliseconds), retry-after (seconds or an HTTP-date,
// relative to now), x-amz-retry-after and grpc-retry-pushback-ms
// (milliseconds). Negative, unparsable and larger-than-a-week values are
// ignored; ok is false when no hint is usable.
func RetryAfter(headers map[string]string, now time.Time) (d time.Duration, ok bool) {
	if v, found := headers["retry-after-ms"]; found {
		if d, ok := parseMillis(v); ok {
			return d, true
		}
	}
	if v, found := headers["retry-after"]; found {
		if d, ok := parseRetryAfter(v, now); ok {
			return d, true
		}
	}
	for _, name := range [...]string{"x-amz-retry-after", "grpc-retry-pushback-ms"} {
		if v, found := headers[name]; found {
			if d, ok := parseMillis(v); ok {
				return d, true
			}
		}
	}
	return 0, false
}

func parseMillis(v string) (time.Duration, bool) {
	ms, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || math.IsNaN(ms) || ms < 0 || ms > float64(maxHint/time.Millisecond) {
		return 0, false
	}
	return time.Duration(ms * float64(time.Millisecond)), true
}

// parseRetryAfter reads a Retry-After value: delay-seconds (a fraction is
// accepted) or an HTTP-date, which counts from now (a past date is 0).
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if math.IsNaN(s) || s < 0 || s > maxHint.Seconds() {
			return 0, false
		}
		return time.Duration(s * float64(time.Second)), true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	d := t.Sub(now)
	if d < 0 {
		d = 0
	}
	if d > maxHint {
		return 0, false
	}
	return d, true
}
