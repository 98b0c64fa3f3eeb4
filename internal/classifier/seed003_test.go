package classifier

import (
	"fmt"
	"testing"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

// Seed 003 (docs/seeds.md): web_fetch's retryable and terminal status sets, in the default
// and web_fetch profiles.
func TestSeed003StatusSets(t *testing.T) {
	t.Parallel()
	var cases []classifyCase
	for _, profile := range []string{"", "web_fetch"} {
		for _, s := range []int32{408, 409, 425, 429, 500, 502, 503, 504} {
			cases = append(cases, classifyCase{
				name:    fmt.Sprintf("%s/retry %d", profile, s),
				profile: profile, failure: &policydv1.Failure{Operation: "web_fetch", Method: "GET", HttpStatus: s},
				wantType: statusType(s), wantRetryable: true, wantRule: statusRule(s),
			})
		}
		terminal := []int32{400, 401, 403, 404, 422}
		for s := int32(402); s <= 499; s++ {
			if s != 408 && s != 409 && s != 425 && s != 429 {
				terminal = append(terminal, s)
			}
		}
		for _, s := range terminal {
			cases = append(cases, classifyCase{
				name:    fmt.Sprintf("%s/terminal %d", profile, s),
				profile: profile, failure: &policydv1.Failure{Operation: "web_fetch", Method: "GET", HttpStatus: s},
				wantType: statusType(s), wantRetryable: false, wantRule: statusRule(s),
			})
		}
	}
	runClassifyCases(t, cases)
}

func statusType(s int32) policydv1.FailureType {
	switch s {
	case 408, 504:
		return typeTimeout
	case 409, 425, 500, 502:
		return typeServerError
	case 429:
		return typeRateLimit
	case 503:
		return typeOverloaded
	case 401, 407:
		return typeAuth
	case 402:
		return typeQuota
	case 403:
		return typePermission
	case 404:
		return typeNotFound
	case 413:
		return typeContextTooLong
	}
	return typeInvalidRequest
}

// statusRule is the rule that decides a web_fetch failure with status s.
func statusRule(s int32) string {
	switch s {
	case 408, 504:
		return "timeout"
	case 409, 425:
		return "conflict"
	case 500, 502:
		return "server_error"
	case 429:
		return "rate_limit"
	case 503:
		return "overloaded"
	case 401:
		return "web.auth_required"
	case 407: // a proxy's, not the origin's: terminal all the same
		return "proxy.auth_required"
	case 402:
		return "quota.exhausted"
	case 403:
		return "web.blocked"
	case 404:
		return "web.not_found"
	case 413:
		return "request_too_large"
	case 400:
		return "invalid_request.400"
	}
	return "invalid_request"
}

// Seed 003's short, deterministic, actionable terminal messages.
func TestSeed003TerminalMessages(t *testing.T) {
	t.Parallel()
	web := func(status int32) *policydv1.Failure {
		return &policydv1.Failure{Provider: "web", Operation: "web_fetch", Method: "GET", HttpStatus: status}
	}
	runClassifyCases(t, []classifyCase{
		{name: "403 blocked", failure: web(403), wantType: typePermission, wantRule: "web.blocked",
			wantRecovery: "Blocked by the origin's policy; try another source."},
		{name: "404 not found", failure: web(404), wantType: typeNotFound, wantRule: "web.not_found",
			wantRecovery: "Page not found; try another URL or query."},
		{name: "401 auth required", failure: web(401), wantType: typeAuth, wantRule: "web.auth_required",
			wantRecovery: "Authentication required; this page is not fetchable anonymously."},
		{name: "web_search 403", failure: &policydv1.Failure{Operation: "web_search", HttpStatus: 403}, wantType: typePermission, wantRule: "web.blocked"},
		{name: "provider 403 is not a web block", failure: &policydv1.Failure{Provider: "anthropic", Operation: "chat", HttpStatus: 403},
			wantType: typePermission, wantRule: "permission.denied"},
		{name: "web network timeout retried", failure: &policydv1.Failure{Operation: "web_fetch", ErrorName: "ReadTimeout"},
			wantType: typeTimeout, wantRetryable: true, wantRule: "network.timeout"},
	})
}

// Seed 003: Retry-After in seconds and as an HTTP-date, and Retry-After-Ms.
func TestSeed003RetryAfterHeaders(t *testing.T) {
	t.Parallel()
	c := newTestClassifier(t)
	tests := []struct {
		name       string
		headers    map[string]string
		wantDelay  string
		wantSource string
	}{
		{name: "seconds", headers: map[string]string{"Retry-After": "7"}, wantDelay: "7s", wantSource: "header retry-after"},
		{name: "http date", headers: map[string]string{"retry-after": "Sun, 22 Nov 2026 12:00:30 GMT"}, wantDelay: "30s", wantSource: "header retry-after"},
		{name: "http date in the past", headers: map[string]string{"retry-after": "Sun, 22 Nov 2026 11:00:00 GMT"}, wantDelay: "0s", wantSource: "header retry-after"},
		{name: "ms", headers: map[string]string{"Retry-After-Ms": "1500"}, wantDelay: "1.5s", wantSource: "header retry-after-ms"},
		{name: "ms wins over seconds", headers: map[string]string{"retry-after-ms": "250", "retry-after": "1"}, wantDelay: "250ms", wantSource: "header retry-after-ms"},
		{name: "bad ms falls back to seconds", headers: map[string]string{"retry-after-ms": "soon", "retry-after": "2"}, wantDelay: "2s", wantSource: "header retry-after"},
		{name: "garbage ignored", headers: map[string]string{"retry-after": "tomorrow-ish"}, wantDelay: "", wantSource: ""},
		{name: "negative ignored", headers: map[string]string{"retry-after": "-5"}, wantDelay: "", wantSource: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := c.Classify(&policydv1.Failure{Operation: "web_fetch", HttpStatus: 429, Headers: tc.headers}, nil, "web_fetch")
			gotDelay := ""
			if got.GetRetryAfter() != nil {
				gotDelay = got.GetRetryAfter().AsDuration().String()
			}
			if gotDelay != tc.wantDelay || got.GetRetryAfterSource() != tc.wantSource {
				t.Errorf("retry_after = %q from %q, want %q from %q", gotDelay, got.GetRetryAfterSource(), tc.wantDelay, tc.wantSource)
			}
		})
	}
}
