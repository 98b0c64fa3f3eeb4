package policyd

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
)

// FailOpenPolicy is the small built-in policy the client decides with when
// policyd cannot be asked (unreachable, or slower than the daemon timeout):
// it retries only clearly transient failures — connection errors and
// timeouts, HTTP 408, 429 and 5xx (except 501), gRPC UNAVAILABLE,
// RESOURCE_EXHAUSTED and DEADLINE_EXCEEDED — with capped exponential backoff
// and full jitter, waits at least a server's delay hint, and never retries an
// irreversible operation or past the caller's deadline. Everything else
// stops at once. The Python and TypeScript clients implement the same
// contract (docs/clients.md), checked by the vectors in clients/testdata.
type FailOpenPolicy struct {
	// MaxAttempts is the total attempts allowed, the first included.
	MaxAttempts int
	// InitialDelay is the backoff after the first attempt, before jitter.
	InitialDelay time.Duration
	// MaxDelay caps the backoff.
	MaxDelay time.Duration
	// Multiplier grows the backoff after every attempt.
	Multiplier float64
	// RetryAfterCeiling: a server asking to wait longer is not waited for.
	RetryAfterCeiling time.Duration
}

// DefaultFailOpenPolicy is the policy WithFailOpenPolicy overrides:
// 3 attempts, 1 s doubling up to 30 s with full jitter, Retry-After
// honoured up to 60 s. Conservative on purpose: without policyd the client
// knows little, and retrying a permanent failure costs money and time.
var DefaultFailOpenPolicy = FailOpenPolicy{
	MaxAttempts:       3,
	InitialDelay:      time.Second,
	MaxDelay:          30 * time.Second,
	Multiplier:        2,
	RetryAfterCeiling: 60 * time.Second,
}

// Decide answers what to do after failed attempt number attempt (1-based)
// of an operation with the given safety (SafetyUnspecified: derived from
// f's operation and method as policyd derives it). now is the current
// time, deadline the caller's (zero: none), rnd the jitter source. The same
// inputs and draws give the same decision; the delay never lands past the
// deadline.
func (p FailOpenPolicy) Decide(f *Failure, attempt int, safety Safety, now, deadline time.Time, rnd Rand) Decision {
	if f == nil {
		f = &Failure{}
	}
	d := failOpenClassify(f)
	d.FailOpen = true
	d.Strategy = "fail-open/" + d.FailureType.String()
	d.StrategySummary = fmt.Sprintf("exponential %v→%v ×%g, full jitter, %d attempts (policyd unreachable)",
		p.InitialDelay, p.MaxDelay, p.Multiplier, p.MaxAttempts)
	if hint, ok := RetryAfter(f.Headers, now); ok {
		d.RetryAfter = hint
	}
	stop := func(r StopReason, text string) Decision {
		d.Action, d.StopReason, d.StopText = ActionStop, r, text
		return d
	}
	if !d.Retryable {
		return stop(StopNotRetryable, "not retryable: "+d.RecoveryAction)
	}
	if safety == SafetyUnspecified {
		safety = deriveSafety(f.Operation, f.Method)
	}
	if safety == SafetyIrreversible {
		return stop(StopIrreversibleOperation, "the operation is irreversible; retrying it could repeat its effect")
	}
	if attempt >= p.MaxAttempts {
		return stop(StopAttemptsExhausted, fmt.Sprintf("all %d attempts were used", p.MaxAttempts))
	}
	backoff := float64(p.InitialDelay) * math.Pow(p.Multiplier, float64(attempt-1))
	if p.MaxDelay > 0 && backoff > float64(p.MaxDelay) {
		backoff = float64(p.MaxDelay)
	}
	r := 0.5
	if rnd != nil {
		r = rnd.Float64()
	}
	delay := time.Duration(backoff * r)
	if d.RetryAfter > 0 {
		if p.RetryAfterCeiling > 0 && d.RetryAfter > p.RetryAfterCeiling {
			return stop(StopServerDelayAboveCeiling,
				fmt.Sprintf("the server asked to wait %v, above the %v ceiling", d.RetryAfter, p.RetryAfterCeiling))
		}
		delay = max(delay, d.RetryAfter)
	}
	if !deadline.IsZero() && now.Add(delay).After(deadline) {
		return stop(StopDeadline, fmt.Sprintf("waiting %v would pass the deadline", delay.Round(time.Millisecond)))
	}
	// Attempts left only on a retry, as policyd answers: a stop leaves none.
	d.Action, d.Delay, d.AttemptsLeft = ActionRetry, delay, p.MaxAttempts-attempt
	return d
}

// connectionCodes are the codes the fail-open policy reads as a connection
// error. ENOTFOUND (no such host) is left out: it is as often a typo as an
// outage.
var connectionCodes = []string{
	"ECONNRESET", "ECONNREFUSED", "ECONNABORTED", "EPIPE", "EHOSTUNREACH", "EHOSTDOWN", "ENETUNREACH", "ENETDOWN",
	"EAI_AGAIN", "UND_ERR_SOCKET", "UND_ERR_CLOSED", "ERR_STREAM_PREMATURE_CLOSE",
}

// timeoutCodes are the codes the fail-open policy reads as a timeout: a
// request that got no answer in time is worth one more try, as policyd's
// default rules say.
var timeoutCodes = []string{
	"ETIMEDOUT", "ESOCKETTIMEDOUT", "UND_ERR_CONNECT_TIMEOUT", "UND_ERR_HEADERS_TIMEOUT", "UND_ERR_BODY_TIMEOUT",
	"ERR_SOCKET_CONNECTION_TIMEOUT",
}

// hasCode says whether f's error code or any cause's code is in list.
func hasCode(f *Failure, list []string) bool {
	return slices.Contains(list, strings.ToUpper(f.ErrorCode)) || slices.ContainsFunc(f.Causes, func(c Cause) bool {
		return slices.Contains(list, strings.ToUpper(c.Code))
	})
}

// failOpenClassify is the fail-open policy's classification: the failure
// type, whether it is retried, and a rule id and recovery action in
// policyd's style.
func failOpenClassify(f *Failure) Decision {
	d := func(t FailureType, retry bool, rule, reason, recovery string) Decision {
		return Decision{Classification: Classification{
			FailureType: t, Retryable: retry, Rule: "fail_open." + rule, Reason: reason, RecoveryAction: recovery,
		}}
	}
	canceled := f.GRPCCode == codes.Canceled
	for _, c := range f.Causes {
		canceled = canceled || c.Name == "context.Canceled"
	}
	if canceled {
		return d(FailureTypeCanceled, false, "canceled", "the caller aborted the operation",
			"Nothing to retry; the operation was cancelled by its caller.")
	}
	switch s := f.HTTPStatus; {
	case s == 429:
		return d(FailureTypeRateLimit, true, "rate_limit", "HTTP 429: the service is throttling requests",
			"Wait and retry with backoff, honouring the server's delay.")
	case s == 503 || s == 529:
		return d(FailureTypeOverloaded, true, "overloaded", fmt.Sprintf("HTTP %d: the service is overloaded", s),
			"Retry with backoff.")
	case s == 504:
		return d(FailureTypeTimeout, true, "gateway_timeout", "HTTP 504: the gateway timed out", "Retry with backoff.")
	case s == 408:
		return d(FailureTypeTimeout, true, "request_timeout", "HTTP 408: the server timed out waiting for the request",
			"Retry with backoff.")
	case s == 501:
		return d(FailureTypeUnsupported, false, "status", "HTTP 501: not implemented",
			"Change approach; the service does not support the request.")
	case s >= 500 && s <= 599:
		return d(FailureTypeServerError, true, "server_error", fmt.Sprintf("HTTP %d: the service failed", s),
			"Retry with backoff.")
	case s == 401:
		return d(FailureTypeAuthInvalid, false, "status", "HTTP 401: the credentials are invalid or missing",
			"Fix the API credentials (key, token or endpoint), then run again.")
	case s == 403:
		return d(FailureTypePermissionDenied, false, "status", "HTTP 403: the credentials are not allowed",
			"Request access to the resource.")
	case s == 404:
		return d(FailureTypeNotFound, false, "status", "HTTP 404: not found", "Use a valid URL, model or resource id.")
	case s == 400 || s == 422:
		return d(FailureTypeInvalidRequest, false, "status", fmt.Sprintf("HTTP %d: the request was refused as invalid", s),
			"Fix the request; the same request will fail again.")
	case s != 0:
		return d(FailureTypeUnknown, false, "status", fmt.Sprintf("HTTP %d is not retried while policyd is unreachable", s),
			"Inspect the response; only connection errors, timeouts, 408, 429 and 5xx are retried without policyd.")
	}
	switch f.GRPCCode {
	case codes.Unavailable:
		return d(FailureTypeOverloaded, true, "grpc_unavailable", "gRPC UNAVAILABLE: the service is unavailable",
			"Retry with backoff.")
	case codes.ResourceExhausted:
		return d(FailureTypeRateLimit, true, "grpc_resource_exhausted", "gRPC RESOURCE_EXHAUSTED: the service is throttling requests",
			"Wait and retry with backoff, honouring the server's delay.")
	case codes.DeadlineExceeded:
		return d(FailureTypeTimeout, true, "grpc_deadline_exceeded", "gRPC DEADLINE_EXCEEDED: the call timed out",
			"Retry; raise the timeout if it persists.")
	}
	if hasCode(f, timeoutCodes) {
		return d(FailureTypeTimeout, true, "timeout", "the request timed out",
			"Retry; raise the timeout if it persists.")
	}
	if hasCode(f, connectionCodes) {
		return d(FailureTypeConnectionError, true, "connection", "the connection failed or was reset",
			"Retry after a short backoff; check the network if it persists.")
	}
	return d(FailureTypeUnknown, false, "unknown",
		"not a connection error, timeout, 408, 429 or 5xx: not retried while policyd is unreachable",
		"Inspect the error; only clearly transient failures are retried without policyd.")
}

// deriveSafety is policyd's default operation safety: model requests and
// GET, HEAD, OPTIONS are safe; other methods and shell, exec, deploy and
// external writes are irreversible; file writes are conditional; anything
// else is safe.
func deriveSafety(operation, method string) Safety {
	op := strings.ToLower(operation)
	if hasPrefix(op, "chat", "completion", "complete", "embed", "messages", "responses", "generate", "model", "llm") {
		return SafetySafe
	}
	if m := strings.ToUpper(strings.TrimSpace(method)); m != "" {
		if m == "GET" || m == "HEAD" || m == "OPTIONS" {
			return SafetySafe
		}
		return SafetyIrreversible
	}
	switch {
	case hasPrefix(op, "shell", "exec", "deploy", "external_write", "api.write", "payment"):
		return SafetyIrreversible
	case hasPrefix(op, "file.write", "file.edit", "write_file", "edit_file", "patch"):
		return SafetyConditional
	}
	return SafetySafe
}

func hasPrefix(s string, prefixes ...string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
