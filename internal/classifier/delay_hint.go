package classifier

import (
	"bytes"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// MaxDelayHint is the longest server delay hint; a longer one (even one too
// large to represent, "2e299") reads as this: the server asked for a wait
// longer than any client accepts, which is not the same as no hint.
const MaxDelayHint = 7 * 24 * time.Hour

// Hint sources, most trusted first. A hint from a more trusted source wins.
const (
	hintNone = iota
	hintRetryAfterMs
	hintRetryAfter
	hintAmzRetryAfter
	hintGRPCPushback
	hintRateLimitReset
	hintBodyField
	hintBodyPhrase
	hintWindow
)

var hintSourceNames = [...]string{
	hintNone:           "",
	hintRetryAfterMs:   "header retry-after-ms",
	hintRetryAfter:     "header retry-after",
	hintAmzRetryAfter:  "header x-amz-retry-after",
	hintGRPCPushback:   "header grpc-retry-pushback-ms",
	hintRateLimitReset: "header x-ratelimit-reset",
	hintBodyField:      "body field",
	hintBodyPhrase:     "body phrase",
	hintWindow:         "rule window",
}

// delayHint keeps the most trusted server delay hint seen so far.
type delayHint struct {
	delay  time.Duration
	source int
}

func (h *delayHint) offer(d time.Duration, ok bool, source int) {
	if !ok || d < 0 {
		return
	}
	d = min(d, MaxDelayHint)
	if h.source == hintNone || source < h.source {
		h.delay, h.source = d, source
	}
}

// ParseRetryAfter reads a Retry-After value: delay seconds (integer or
// decimal) or an HTTP-date, relative to now. A date in the past means 0.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if c := v[0]; c == '-' || c == '+' || c == '.' || (c >= '0' && c <= '9') {
		return seconds(v, time.Second)
	}
	t, err := http.ParseTime(v)
	if err != nil {
		// Some servers write a one-digit day or the zone as UTC (urllib3
		// accepts both): "Mon, 3 Jun 2019 12:00:00 UTC".
		t, err = time.Parse("Mon, 2 Jan 2006 15:04:05 MST", v)
		if err != nil || (t.Location() != time.UTC && !strings.HasSuffix(v, " GMT")) {
			return 0, false
		}
	}
	return untilTime(t, now)
}

// ParseMillis reads a delay in milliseconds, such as retry-after-ms.
func ParseMillis(v string) (time.Duration, bool) {
	return seconds(strings.TrimSpace(v), time.Millisecond)
}

// plainDecimal says v is a decimal number: digits with at most one '.',
// and optionally an exponent ("1e2"), as the clients read it
// (docs/clients.md). strconv.ParseFloat alone also takes Go's literal forms
// ("1_000", "0x1p3", "inf"), which no server sends.
func plainDecimal(v string) bool {
	mantissa, exp, hasExp := v, "", false
	if i := strings.IndexAny(v, "eE"); i >= 0 {
		mantissa, exp, hasExp = v[:i], strings.TrimLeft(v[i+1:], "+-"), true
		if len(v[i+1:])-len(exp) > 1 {
			return false
		}
	}
	digits, dots := 0, 0
	for i := 0; i < len(mantissa); i++ {
		switch c := mantissa[i]; {
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

// seconds parses a non-negative plain decimal number of units.
func seconds(v string, unit time.Duration) (time.Duration, bool) {
	if !plainDecimal(v) {
		return 0, false
	}
	f, err := strconv.ParseFloat(v, 64)
	if (err != nil && !isRangeError(err)) || math.IsNaN(f) || f < 0 {
		return 0, false
	}
	d := f * float64(unit)
	if d > float64(MaxDelayHint) {
		return MaxDelayHint, true
	}
	return time.Duration(d), true
}

// ParseRateLimitReset reads an x-ratelimit-reset* value in the shapes
// providers use: a Go-style duration ("1s", "6m0s", "20ms"), an RFC 3339
// time, Unix epoch seconds or milliseconds, or plain seconds to wait.
func ParseRateLimitReset(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil || isRangeError(err) {
		if math.IsNaN(f) || f < 0 {
			return 0, false
		}
		switch {
		case f > 1e15:
			return MaxDelayHint, true
		case f > 1e12: // epoch milliseconds
			return untilTime(time.UnixMilli(int64(f)), now)
		case f > 1e9: // epoch seconds
			return untilTime(time.Unix(int64(f), 0), now)
		default:
			return seconds(v, time.Second)
		}
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return min(d, MaxDelayHint), true
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return untilTime(t, now)
	}
	return 0, false
}

// untilTime is the wait until t: 0 for a time in the past, not ok for one
// more than MaxDelayHint away.
func untilTime(t, now time.Time) (time.Duration, bool) {
	d := t.Sub(now)
	switch {
	case d <= 0:
		return 0, true
	case d > MaxDelayHint:
		return MaxDelayHint, true
	}
	return d, true
}

func isRangeError(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

// ParseGoogleDuration reads a google.protobuf.Duration in its JSON form,
// such as RetryInfo's retryDelay "20s" or "1.5s".
func ParseGoogleDuration(v string) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	num, ok := strings.CutSuffix(v, "s")
	if !ok {
		return 0, false
	}
	return seconds(num, time.Second)
}

// phraseStarts are the lower-case phrases after which bodies and messages
// state a delay: "Please retry in 20s", "Try again in 59 seconds".
var phraseStarts = func() []substring {
	var out []substring
	for _, p := range []string{"retry in ", "try again in ", "retry after ", "try again after ",
		// "The model is overloaded ... available in 831 seconds",
		// "Expected available in 3 hours", "limit resets in 20 minutes".
		"available in ", "resets in ", "reset in ", "please wait ",
		// "Your quota will reset after 27h41m36s".
		"reset after ", "resets after ",
		// Other languages' "try again after/in": Polish ("spróbuj ponownie
		// po 2492 sekundach", "ponownie za"), Spanish, Portuguese, French,
		// German; their unit words are read below.
		"ponownie po ", "ponownie za ", "de nuevo en ", "novamente em ", "essayez dans ", "essayer dans ", "erneut in ",
		// "available again in 3 minutes", "wait 30 seconds", "wait for 2 minutes".
		"again in ", "wait ", "wait for "} {
		out = append(out, newSubstring(p))
	}
	return out
}()

var retryAfterText = newSubstring("retry-after")

// ParseDelayPhrase finds a delay stated in lower-case text, such as
// "please retry in 20.5s" or "try again in 59 seconds".
func ParseDelayPhrase(text []byte) (time.Duration, bool) {
	var bigrams bigramSet
	bigrams.build(text)
	return parseDelayPhrase(text, &bigrams)
}

// parseDelayPhrase is ParseDelayPhrase with the text's bigrams, which skip
// the phrases the text cannot hold.
func parseDelayPhrase(text []byte, bigrams *bigramSet) (time.Duration, bool) {
	// A Retry-After header a wrapper printed into its message: seconds
	// with no unit ("HTTP 429, Retry-After: 30").
	if retryAfterText.maybeIn(bigrams) {
		if i := bytes.Index(text, retryAfterText.text); i >= 0 {
			rest := bytes.TrimLeft(text[i+len(retryAfterText.text):], " :=")
			n := 0
			for n < len(rest) && ((rest[n] >= '0' && rest[n] <= '9') || rest[n] == '.') {
				n++
			}
			if n > 0 && (n == len(rest) || rest[n] < 'a' || rest[n] > 'z') {
				if d, ok := seconds(string(rest[:n]), time.Second); ok {
					return d, true
				}
			}
		}
	}
	for i := range phraseStarts {
		if !phraseStarts[i].maybeIn(bigrams) {
			continue
		}
		p := phraseStarts[i].text
		rest := text
		for {
			i := bytes.Index(rest, p)
			if i < 0 {
				break
			}
			rest = rest[i+len(p):]
			if d, ok := parseAmount(rest); ok {
				return d, true
			}
		}
	}
	return 0, false
}

// parseAmount reads "<number>[ ]<unit>" at the start of b, where unit is
// ms, s, sec(s), second(s), m, min(s), minute(s), h, hour(s); a compact Go
// duration such as "1m30s" is read whole.
func parseAmount(b []byte) (time.Duration, bool) {
	n := 0
	for n < len(b) && ((b[n] >= '0' && b[n] <= '9') || b[n] == '.') {
		n++
	}
	if n == 0 {
		return 0, false
	}
	num := string(b[:n])
	rest := b[n:]
	// A compact duration: digits and unit letters with no space.
	m := 0
	for m < len(rest) && ((rest[m] >= 'a' && rest[m] <= 'z') || (rest[m] >= '0' && rest[m] <= '9') || rest[m] == '.') {
		m++
	}
	// A sentence may end right after it: "try again in 9m38.016s."
	for m > 0 && rest[m-1] == '.' {
		m--
	}
	if m > 0 {
		if d, err := time.ParseDuration(num + string(rest[:m])); err == nil && d >= 0 {
			return min(d, MaxDelayHint), true
		}
	}
	rest = bytes.TrimLeft(rest, " ")
	unitEnd := 0
	for unitEnd < len(rest) && rest[unitEnd] >= 'a' && rest[unitEnd] <= 'z' {
		unitEnd++
	}
	var unit time.Duration
	switch word := string(rest[:unitEnd]); word {
	case "ms", "msec", "msecs", "millisecond", "milliseconds":
		unit = time.Millisecond
	case "s", "sec", "secs", "second", "seconds":
		unit = time.Second
	case "m", "min", "mins", "minute", "minutes":
		unit = time.Minute
	case "h", "hr", "hrs", "hour", "hours":
		unit = time.Hour
	default:
		if unit = unitWord(word); unit == 0 {
			return 0, false
		}
	}
	return seconds(num, unit)
}

// unitWord reads the unit words of other languages by their stems: seconds
// (sekund*, segundo*, seconde*, sekunde*), minutes (minut*, minuto*) and
// hours (godzin*, hora*, heure*, stunde*); 0 when word is none of them.
func unitWord(word string) time.Duration {
	if len(word) < 4 {
		return 0
	}
	for _, u := range [...]struct {
		stem string
		unit time.Duration
	}{
		{"sekund", time.Second}, {"segund", time.Second}, {"second", time.Second},
		{"minut", time.Minute},
		{"godzin", time.Hour}, {"hora", time.Hour}, {"heure", time.Hour}, {"stunde", time.Hour},
	} {
		if strings.HasPrefix(word, u.stem) {
			return u.unit
		}
	}
	return 0
}
