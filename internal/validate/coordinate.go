package validate

import (
	"strconv"
	"strings"
	"time"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

// Coordinate stream limits: a report is counts, not data.
const (
	// MaxUsages bounds the buckets in one report.
	MaxUsages = 256
	// MaxCallsPerSecond bounds each count of a report by its interval: the
	// calls one client process makes to one target in a second. Far above
	// what a provider lets one key do (OpenAI's highest tier: 10,000
	// requests a minute, under 170 a second), so a real client never meets
	// it, while a forged count cannot outweigh a fleet's real ones (a
	// billion successes in one report kept a real outage's breaker closed).
	MaxCallsPerSecond = 1000
	// MaxInputTokensPerCall bounds a report's token counts by the calls
	// they are for: the largest context window on offer is about two
	// million tokens, so a real estimate never meets it.
	MaxInputTokensPerCall = 2_000_000
	// MaxReportInterval bounds usage.elapsed.
	MaxReportInterval = 10 * time.Minute
	// MaxRateLimitHeaders bounds usage.rate_limit_headers, and
	// MaxRateLimitValueBytes each value.
	MaxRateLimitHeaders    = 16
	MaxRateLimitValueBytes = 64
)

// RateLimitHeaderPrefixes are the header names a report may carry.
var RateLimitHeaderPrefixes = []string{"x-ratelimit-", "anthropic-ratelimit-"}

// CoordinateRequest checks one message of a Coordinate stream but its
// usages (Usage checks each, so that the server applies those before a bad
// one); first says whether it opens the stream (which must name the client).
//
//   - client_id is required in the first message, at most 128 bytes;
//   - profile is a profile name (the caller checks that it exists);
//   - usage has at most 256 entries.
func CoordinateRequest(req *policydv1.CoordinateRequest, first bool) error {
	if first {
		if req.GetClientId() == "" {
			return Fieldf("client_id", "required in the stream's first message")
		}
		if n := len(req.GetClientId()); n > MaxLabelBytes {
			return Fieldf("client_id", "%d bytes, at most %d allowed", n, MaxLabelBytes)
		}
		if err := Name("profile", req.GetProfile()); err != nil {
			return err
		}
	}
	if n := len(req.GetUsage()); n > MaxUsages {
		return Fieldf("usage", "%d entries, at most %d allowed in one report", n, MaxUsages)
	}
	return nil
}

// Usage checks usage[i] of a report: a target whose provider is required
// (at most 8 KiB, as model; key_id at most 128 bytes), an elapsed time in
// (0, 10m], counts of at most MaxCallsPerSecond for each second of it (of
// interval, when shorter: the time the server saw pass since the stream's
// last report of the target; 0 for none; at least a second either way),
// fell_back at most shed, and at most 16 rate-limit headers (x-ratelimit-* or
// anthropic-ratelimit-*, values of at most 64 bytes).
func Usage(i int, u *policydv1.BucketUsage, interval time.Duration) error {
	if err := usage(u, interval); err != nil {
		fe := err.(*FieldError)
		fe.Field = "usage[" + strconv.Itoa(i) + "]." + fe.Field
		return fe
	}
	return nil
}

func usage(u *policydv1.BucketUsage, interval time.Duration) error {
	t := u.GetTarget()
	switch {
	case t.GetProvider() == "":
		return Fieldf("target.provider", "required")
	case len(t.GetProvider()) > MaxFieldBytes:
		return Fieldf("target.provider", "%d bytes, at most %d allowed", len(t.GetProvider()), MaxFieldBytes)
	case len(t.GetModel()) > MaxFieldBytes:
		return Fieldf("target.model", "%d bytes, at most %d allowed", len(t.GetModel()), MaxFieldBytes)
	case len(t.GetKeyId()) > MaxLabelBytes:
		return Fieldf("target.key_id", "%d bytes, at most %d allowed", len(t.GetKeyId()), MaxLabelBytes)
	}
	if u.GetElapsed() == nil {
		return Fieldf("elapsed", "required (the time since the bucket's last report)")
	}
	if err := u.GetElapsed().CheckValid(); err != nil {
		return Fieldf("elapsed", "%v", err)
	}
	if d := u.GetElapsed().AsDuration(); d <= 0 || d > MaxReportInterval {
		return Fieldf("elapsed", "%v is not in (0, %v]", d, MaxReportInterval)
	}
	span := u.GetElapsed().AsDuration()
	if interval > 0 && interval < span {
		span = interval
	}
	span = max(span, time.Second)
	limit := uint64(span.Seconds() * MaxCallsPerSecond)
	for _, c := range [...]struct {
		name string
		n    uint64
	}{{"admitted", u.GetAdmitted()}, {"shed", u.GetShed()}, {"succeeded", u.GetSucceeded()}, {"failed", u.GetFailed()}, {"retries", u.GetRetries()},
		{"parked_new", u.GetParkedNew()}} {
		if c.n > limit {
			return Fieldf(c.name, "%d in %v is more than one process does (at most %d calls a second)", c.n, span.Round(time.Millisecond), MaxCallsPerSecond)
		}
	}
	if n := u.GetAdmitted() + u.GetShed(); n > limit {
		return Fieldf("admitted", "admitted and shed together, %d in %v, are more than one process does (at most %d calls a second)", n, span.Round(time.Millisecond), MaxCallsPerSecond)
	}
	for _, c := range [...]struct {
		name  string
		n     uint64
		calls uint64
		what  string
	}{
		{"first_attempt_input_tokens", u.GetFirstAttemptInputTokens(), u.GetAdmitted() + u.GetShed() + u.GetParkedNew(), "first attempts (admitted, shed and parked_new)"},
		{"retry_input_tokens", u.GetRetryInputTokens(), u.GetRetries(), "retries"},
		{"input_tokens_used", u.GetInputTokensUsed(), u.GetAdmitted() + u.GetRetries(), "attempts (admitted and retries)"},
		{"output_tokens_used", u.GetOutputTokensUsed(), u.GetOutputTokensUsedCalls(), "calls that reported it (output_tokens_used_calls)"},
		{"input_tokens_estimated_for_used", u.GetInputTokensEstimatedForUsed(), u.GetAdmitted() + u.GetRetries(), "attempts (admitted and retries)"},
	} {
		if c.n > c.calls*MaxInputTokensPerCall {
			return Fieldf(c.name, "%d tokens for %d %s: at most %d a call", c.n, c.calls, c.what, MaxInputTokensPerCall)
		}
	}
	if n, most := u.GetOutputTokensUsedCalls(), u.GetAdmitted()+u.GetRetries(); n > most {
		return Fieldf("output_tokens_used_calls", "%d, more than the attempts (admitted and retries, %d)", n, most)
	}
	if n, shed := u.GetFellBack(), u.GetShed(); n > shed {
		return Fieldf("fell_back", "%d, more than shed (%d): it counts the shed first attempts sent to a fallback", n, shed)
	}
	if n, most := u.GetBatchFirstAttempts(), u.GetAdmitted()+u.GetShed()+u.GetParkedNew(); n > most {
		return Fieldf("batch_first_attempts", "%d, more than admitted, shed and parked_new together (%d)", n, most)
	}
	h := u.GetRateLimitHeaders()
	if len(h) > MaxRateLimitHeaders {
		return Fieldf("rate_limit_headers", "%d entries, at most %d allowed", len(h), MaxRateLimitHeaders)
	}
	for name, v := range h {
		field := "rate_limit_headers[" + strconv.Quote(name) + "]"
		if !hasRateLimitPrefix(name) {
			return Fieldf(field, "not a rate-limit header (want x-ratelimit-* or anthropic-ratelimit-*)")
		}
		if len(v) > MaxRateLimitValueBytes {
			return Fieldf(field, "%d bytes, at most %d allowed", len(v), MaxRateLimitValueBytes)
		}
	}
	return nil
}

func hasRateLimitPrefix(name string) bool {
	n := strings.ToLower(name)
	for _, p := range RateLimitHeaderPrefixes {
		if strings.HasPrefix(n, p) && len(n) > len(p) {
			return true
		}
	}
	return false
}
