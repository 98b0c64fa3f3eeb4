package policyd_test

import (
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	policyd "github.com/policyd/policyd/clients/go"
)

// The fail-open policy decides without policyd; with a fixed clock and
// random draw it is deterministic.
func TestFailOpenPolicyDecide(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	p := policyd.DefaultFailOpenPolicy
	s := time.Second
	conn := &policyd.Failure{ErrorCode: "ECONNRESET", Message: "read: connection reset by peer"}
	tests := []struct {
		name      string
		f         *policyd.Failure
		attempt   int
		safety    policyd.Safety
		deadline  time.Time
		rand      float64
		wantType  policyd.FailureType
		wantDelay time.Duration // RETRY when > 0 or wantStop is unspecified
		wantStop  policyd.StopReason
	}{
		{name: "503: full jitter on 1s", f: &policyd.Failure{HTTPStatus: 503}, attempt: 1, rand: 0.5,
			wantType: policyd.FailureTypeOverloaded, wantDelay: 500 * time.Millisecond},
		{name: "500 second attempt: 2s backoff", f: &policyd.Failure{HTTPStatus: 500}, attempt: 2, rand: 0.25,
			wantType: policyd.FailureTypeServerError, wantDelay: 500 * time.Millisecond},
		{name: "529 overloaded", f: &policyd.Failure{HTTPStatus: 529}, attempt: 1, rand: 1,
			wantType: policyd.FailureTypeOverloaded, wantDelay: s},
		{name: "504 gateway timeout", f: &policyd.Failure{HTTPStatus: 504}, attempt: 1, rand: 0.5,
			wantType: policyd.FailureTypeTimeout, wantDelay: 500 * time.Millisecond},
		{name: "429 honours retry-after", f: &policyd.Failure{HTTPStatus: 429, Headers: map[string]string{"retry-after": "7"}},
			attempt: 1, rand: 0.5, wantType: policyd.FailureTypeRateLimit, wantDelay: 7 * s},
		{name: "429 honours retry-after-ms over retry-after",
			f:       &policyd.Failure{HTTPStatus: 429, Headers: map[string]string{"retry-after-ms": "1500", "retry-after": "9"}},
			attempt: 1, rand: 0, wantType: policyd.FailureTypeRateLimit, wantDelay: 1500 * time.Millisecond},
		{name: "429 retry-after as an HTTP-date",
			f:       &policyd.Failure{HTTPStatus: 429, Headers: map[string]string{"retry-after": now.Add(4 * s).Format(http.TimeFormat)}},
			attempt: 1, rand: 0, wantType: policyd.FailureTypeRateLimit, wantDelay: 4 * s},
		{name: "retry-after above the ceiling stops", f: &policyd.Failure{HTTPStatus: 429, Headers: map[string]string{"retry-after": "120"}},
			attempt: 1, wantType: policyd.FailureTypeRateLimit, wantStop: policyd.StopServerDelayAboveCeiling},
		{name: "connection reset", f: conn, attempt: 1, rand: 0.5,
			wantType: policyd.FailureTypeConnectionError, wantDelay: 500 * time.Millisecond},
		{name: "connection refused in a cause", f: &policyd.Failure{Causes: []policyd.Cause{{Name: "syscall.Errno", Code: "ECONNREFUSED"}}},
			attempt: 1, rand: 0.5, wantType: policyd.FailureTypeConnectionError, wantDelay: 500 * time.Millisecond},
		{name: "gRPC unavailable", f: &policyd.Failure{GRPCCode: codes.Unavailable}, attempt: 1, rand: 0.5,
			wantType: policyd.FailureTypeOverloaded, wantDelay: 500 * time.Millisecond},
		{name: "attempts exhausted", f: &policyd.Failure{HTTPStatus: 503}, attempt: 3,
			wantType: policyd.FailureTypeOverloaded, wantStop: policyd.StopAttemptsExhausted},
		{name: "deadline", f: &policyd.Failure{HTTPStatus: 429, Headers: map[string]string{"retry-after": "5"}}, attempt: 1,
			deadline: now.Add(2 * s), wantType: policyd.FailureTypeRateLimit, wantStop: policyd.StopDeadline},
		{name: "irreversible operation", f: &policyd.Failure{HTTPStatus: 503, Operation: "shell.exec"}, attempt: 1,
			wantType: policyd.FailureTypeOverloaded, wantStop: policyd.StopIrreversibleOperation},
		{name: "POST to a web API is not repeated", f: &policyd.Failure{HTTPStatus: 503, Operation: "web_fetch", Method: "POST"},
			attempt: 1, wantType: policyd.FailureTypeOverloaded, wantStop: policyd.StopIrreversibleOperation},
		{name: "POST of a chat call is", f: &policyd.Failure{HTTPStatus: 503, Operation: "chat", Method: "POST"},
			attempt: 1, rand: 0.5, wantType: policyd.FailureTypeOverloaded, wantDelay: 500 * time.Millisecond},
		{name: "explicit safety wins", f: &policyd.Failure{HTTPStatus: 503, Operation: "shell.exec"}, attempt: 1,
			safety: policyd.SafetySafe, rand: 0.5, wantType: policyd.FailureTypeOverloaded, wantDelay: 500 * time.Millisecond},
		{name: "401 stops", f: &policyd.Failure{HTTPStatus: 401}, attempt: 1,
			wantType: policyd.FailureTypeAuthInvalid, wantStop: policyd.StopNotRetryable},
		{name: "400 stops", f: &policyd.Failure{HTTPStatus: 400}, attempt: 1,
			wantType: policyd.FailureTypeInvalidRequest, wantStop: policyd.StopNotRetryable},
		{name: "404 stops", f: &policyd.Failure{HTTPStatus: 404}, attempt: 1,
			wantType: policyd.FailureTypeNotFound, wantStop: policyd.StopNotRetryable},
		{name: "501 stops", f: &policyd.Failure{HTTPStatus: 501}, attempt: 1,
			wantType: policyd.FailureTypeUnsupported, wantStop: policyd.StopNotRetryable},
		{name: "408 is retried", f: &policyd.Failure{HTTPStatus: 408}, attempt: 1, rand: 0.5,
			wantType: policyd.FailureTypeTimeout, wantDelay: 500 * time.Millisecond},
		{name: "a timeout is retried", f: &policyd.Failure{ErrorCode: "ETIMEDOUT"}, attempt: 1, rand: 0.5,
			wantType: policyd.FailureTypeTimeout, wantDelay: 500 * time.Millisecond},
		{name: "no such host is not clearly transient", f: &policyd.Failure{ErrorCode: "ENOTFOUND"}, attempt: 1,
			wantType: policyd.FailureTypeUnknown, wantStop: policyd.StopNotRetryable},
		{name: "cancellation stops", f: &policyd.Failure{Causes: []policyd.Cause{{Name: "context.Canceled"}}, ErrorCode: "ECONNRESET"},
			attempt: 1, wantType: policyd.FailureTypeCanceled, wantStop: policyd.StopNotRetryable},
		{name: "an unknown error stops", f: &policyd.Failure{Message: "boom"}, attempt: 1,
			wantType: policyd.FailureTypeUnknown, wantStop: policyd.StopNotRetryable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := p.Decide(tt.f, tt.attempt, tt.safety, now, tt.deadline, fixedRand(tt.rand))
			if !d.FailOpen || d.FailureType != tt.wantType {
				t.Errorf("decision %+v: want a fail-open decision on %v", d, tt.wantType)
			}
			if tt.wantStop != policyd.StopReasonUnspecified {
				if d.Action != policyd.ActionStop || d.StopReason != tt.wantStop || d.StopText == "" {
					t.Errorf("decision %+v: want STOP %v with a reason", d, tt.wantStop)
				}
				return
			}
			if d.Action != policyd.ActionRetry || d.Delay != tt.wantDelay {
				t.Errorf("decision %v after %v (%+v): want RETRY after %v", d.Action, d.Delay, d, tt.wantDelay)
			}
		})
	}
}

// Full jitter: every delay is within [0, capped backoff], and the cap holds
// for late attempts.
func TestFailOpenPolicyDelayBounds(t *testing.T) {
	t.Parallel()
	p := policyd.FailOpenPolicy{MaxAttempts: 20, InitialDelay: time.Second, MaxDelay: 8 * time.Second, Multiplier: 2, RetryAfterCeiling: time.Minute}
	now := time.Now()
	for attempt := 1; attempt < 20; attempt++ {
		upper := min(time.Duration(1<<(attempt-1))*time.Second, 8*time.Second)
		for _, r := range []float64{0, 0.3, 0.999} {
			d := p.Decide(&policyd.Failure{HTTPStatus: 503}, attempt, 0, now, time.Time{}, fixedRand(r))
			if d.Action != policyd.ActionRetry || d.Delay < 0 || d.Delay > upper {
				t.Fatalf("attempt %d, draw %v: %v after %v, want RETRY within [0, %v]", attempt, r, d.Action, d.Delay, upper)
			}
		}
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		headers map[string]string
		want    time.Duration
		ok      bool
	}{
		{name: "none", headers: nil},
		{name: "seconds", headers: map[string]string{"retry-after": "2"}, want: 2 * time.Second, ok: true},
		{name: "fractional seconds", headers: map[string]string{"retry-after": "0.5"}, want: 500 * time.Millisecond, ok: true},
		{name: "HTTP-date", headers: map[string]string{"retry-after": "Sun, 22 Nov 2026 08:00:30 GMT"}, want: 30 * time.Second, ok: true},
		{name: "past HTTP-date", headers: map[string]string{"retry-after": "Sun, 22 Nov 2026 07:00:00 GMT"}, want: 0, ok: true},
		{name: "milliseconds first", headers: map[string]string{"retry-after-ms": "250", "retry-after": "3"}, want: 250 * time.Millisecond, ok: true},
		{name: "bad ms falls through", headers: map[string]string{"retry-after-ms": "soon", "retry-after": "3"}, want: 3 * time.Second, ok: true},
		{name: "aws", headers: map[string]string{"x-amz-retry-after": "1200"}, want: 1200 * time.Millisecond, ok: true},
		{name: "grpc pushback", headers: map[string]string{"grpc-retry-pushback-ms": "40"}, want: 40 * time.Millisecond, ok: true},
		{name: "negative", headers: map[string]string{"retry-after": "-1"}},
		{name: "over a week", headers: map[string]string{"retry-after": "700000"}},
		{name: "garbage", headers: map[string]string{"retry-after": "later"}},
		{name: "NaN", headers: map[string]string{"retry-after-ms": "NaN"}},
	}
	for _, tt := range tests {
		got, ok := policyd.RetryAfter(tt.headers, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: RetryAfter(%v) = %v, %v; want %v, %v", tt.name, tt.headers, got, ok, tt.want, tt.ok)
		}
	}
}

// FuzzRetryAfter: a header value from the network never yields a negative
// or week-long wait, and never panics.
func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"1", "0.5", "-3", "1e9", "NaN", "Inf", "Sun, 22 Nov 2026 08:00:30 GMT", "", " 7 "} {
		f.Add(s, s)
	}
	now := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, ms, ra string) {
		d, ok := policyd.RetryAfter(map[string]string{"retry-after-ms": ms, "retry-after": ra}, now)
		if ok && (d < 0 || d > 7*24*time.Hour) {
			t.Errorf("RetryAfter(%q, %q) = %v", ms, ra, d)
		}
		if !ok && d != 0 {
			t.Errorf("RetryAfter(%q, %q) = %v without ok", ms, ra, d)
		}
	})
}
