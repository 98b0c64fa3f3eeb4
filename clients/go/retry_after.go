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
// case, as in Failure.Headers), from the most trusted source that holds a
// usable value: retry-after-ms (milliseconds), retry-after (seconds or an
// HTTP-date, counted from the date header when it parses, else from now),
// x-amz-retry-after and grpc-retry-pushback-ms (milliseconds). Zero and a
// past date are a hint of 0; negative, unparsable and larger-than-a-week
// values are ignored; ok is false when no hint is usable. This is policyd's
// reading (docs/clients.md).
func RetryAfter(headers map[string]string, now time.Time) (d time.Duration, ok bool) {
	if v, found := headers["retry-after-ms"]; found {
		if d, ok := parseMillis(v); ok {
			return d, true
		}
	}
	if v, found := headers["retry-after"]; found {
		// The server's clock, when it says, is immune to skew.
		if t, err := http.ParseTime(strings.TrimSpace(headers["date"])); err == nil {
			now = t
		}
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
	v = strings.TrimSpace(v)
	ms, err := strconv.ParseFloat(v, 64)
	if err != nil || !decimal(v) || math.IsNaN(ms) || ms < 0 || ms > float64(maxHint/time.Millisecond) {
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
		if !decimal(v) || math.IsNaN(s) || s < 0 || s > maxHint.Seconds() {
			return 0, false
		}
		return time.Duration(s * float64(time.Second)), true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		// Some servers write a one-digit day or the zone as UTC, as policyd
		// accepts: "Thu, 1 Jan 2026 00:00:30 UTC".
		t, err = time.Parse("Mon, 2 Jan 2006 15:04:05 MST", v)
		if err != nil || (t.Location() != time.UTC && !strings.HasSuffix(v, " GMT")) {
			return 0, false
		}
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

// decimal says v is a decimal number, digits with at most one '.' and an
// optional exponent ("1e2"): strconv.ParseFloat also takes Go's literal
// forms ("1_000", "0x1p3", "inf"), which no server sends (docs/clients.md).
func decimal(v string) bool {
	mantissa, exp, hasExp := v, "", false
	if i := strings.IndexAny(v, "eE"); i >= 0 {
		mantissa, exp, hasExp = v[:i], strings.TrimLeft(v[i+1:], "+-"), true
		if len(v[i+1:])-len(exp) > 1 {
			return false
		}
	}
	digits, dots := 0, 0
	for _, c := range mantissa {
		switch {
		case c >= '0' && c <= '9':
			digits++
		case c == '.':
			dots++
		default:
			return false
		}
	}
	if hasExp && (exp == "" || strings.Trim(exp, "0123456789") != "") {
		return false
	}
	return digits > 0 && dots <= 1
}
