package classifier

import (
	"net/http"
	"testing"
	"time"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

// The decision model the peers' tests need (conformance/README.md): names
// with or without their module prefix, a timeout told from a cancellation,
// structured quota details before phrases, a task runner's bare codes, and
// AWS's XML error codes.
func TestDecisionModelRules(t *testing.T) {
	t.Parallel()
	googleQuota := func(quotaID, message string) string {
		return `{"error":{"code":429,"message":"` + message + `","status":"RESOURCE_EXHAUSTED","details":[` +
			`{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaId":"` + quotaID + `"}]}]}}`
	}
	runClassifyCases(t, []classifyCase{
		{name: "python module prefix", failure: &policydv1.Failure{ErrorName: "openai.APITimeoutError", Message: "Request timed out."},
			wantType: typeTimeout, wantRetryable: true, wantRule: "network.timeout"},
		{name: "botocore module path", failure: &policydv1.Failure{ErrorName: "botocore.exceptions.ReadTimeoutError"},
			wantType: typeTimeout, wantRetryable: true, wantRule: "network.timeout"},
		{name: "java package", failure: &policydv1.Failure{ErrorName: "java.net.SocketTimeoutException", Message: "Read timed out"},
			wantType: typeTimeout, wantRetryable: true, wantRule: "timeout.signal"},
		{name: "java connect refused", failure: &policydv1.Failure{ErrorName: "java.net.ConnectException", Message: "Connection refused"},
			wantType: typeConnection, wantRetryable: true, wantRule: "network.connection"},
		{name: "go pointer type", failure: &policydv1.Failure{ErrorName: "*net.OpError", Message: "dial tcp 127.0.0.1:443: connect: connection refused"},
			wantType: typeConnection, wantRetryable: true, wantRule: "network.connection"},
		{name: "cause with module prefix", failure: &policydv1.Failure{ErrorName: "openai.APIConnectionError",
			Causes: []*policydv1.Cause{{Name: "httpx.ConnectError", Message: "[Errno 111] Connection refused"}}},
			wantType: typeConnection, wantRetryable: true, wantRule: "network.connection"},
		{name: "AbortSignal.timeout is a timeout", failure: &policydv1.Failure{ErrorName: "TimeoutError", Message: "The operation was aborted due to timeout", ErrorCode: "23"},
			wantType: typeTimeout, wantRetryable: true, wantRule: "timeout.signal"},
		{name: "a user's abort stays a cancellation", failure: &policydv1.Failure{ErrorName: "AbortError", Message: "This operation was aborted"},
			wantType: typeCanceled, wantRetryable: false, wantRule: "cancel.abort"},
		{name: "per-minute quotaId beats an exhausted-sounding message",
			failure:  &policydv1.Failure{Provider: "google", HttpStatus: 429, Body: googleQuota("GenerateRequestsPerMinutePerProjectPerModel-FreeTier", "You exceeded your current quota, please check your plan and billing details.")},
			wantType: typeRateLimit, wantRetryable: true, wantRule: "rate_limit.per_minute_quota"},
		{name: "per-day quotaId", failure: &policydv1.Failure{Provider: "google", HttpStatus: 429, Body: googleQuota("GenerateRequestsPerDayPerProjectPerModel-FreeTier", "You exceeded your current quota.")},
			wantType: typeQuota, wantRetryable: false, wantRule: "quota.daily"},
		{name: "ErrorInfo quota_limit", failure: &policydv1.Failure{Provider: "google", HttpStatus: 429,
			Body: `{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","message":"Quota exceeded.","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"RATE_LIMIT_EXCEEDED","metadata":{"quota_limit":"GenerateContentRequestsPerMinutePerProjectPerRegion"}}]}}`},
			wantType: typeRateLimit, wantRetryable: true, wantRule: "rate_limit.per_minute_quota"},
		{name: "task_runner bare TIMEOUT", profile: "task_runner", failure: &policydv1.Failure{ErrorCode: "TIMEOUT"},
			wantType: policydv1.FailureType_FAILURE_TYPE_TASK_TRANSIENT, wantRetryable: true, wantRule: "task.transient"},
		{name: "task_runner unknown code", profile: "task_runner", failure: &policydv1.Failure{ErrorCode: "SANDBOX_GONE"},
			wantType: policydv1.FailureType_FAILURE_TYPE_TASK_TRANSIENT, wantRetryable: true, wantRule: "task.unknown_code"},
		{name: "bare TIMEOUT outside task_runner is not a task code", failure: &policydv1.Failure{ErrorCode: "TIMEOUT"},
			wantType: policydv1.FailureType_FAILURE_TYPE_UNKNOWN, wantRetryable: false, wantRule: "unknown"},
		{name: "AWS query protocol XML code", failure: &policydv1.Failure{Provider: "aws", HttpStatus: 400,
			Body: `<ErrorResponse><Error><Type>Sender</Type><Code>Throttling</Code><Message>Rate exceeded</Message></Error></ErrorResponse>`},
			wantType: typeRateLimit, wantRetryable: true, wantRule: "rate_limit"},
		{name: "an error envelope printed into the message", failure: &policydv1.Failure{ErrorName: "litellm.AuthenticationError",
			Message: `AnthropicException - {"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`},
			wantType: typeAuth, wantRetryable: false, wantRule: "auth.invalid"},
		{name: "a Python dict printed into the message", failure: &policydv1.Failure{ErrorName: "google.genai.errors.ClientError",
			Message: `404 NOT_FOUND. {'error': {'code': 404, 'message': 'models/gemini-9 is not found', 'status': 'NOT_FOUND'}}`},
			wantType: policydv1.FailureType_FAILURE_TYPE_NOT_FOUND, wantRetryable: false, wantRule: "not_found"},
		{name: "a 403 whose rate limit is used up, in its headers only", failure: &policydv1.Failure{HttpStatus: 403,
			Headers: map[string]string{"x-ratelimit-remaining": "0", "x-ratelimit-reset": "1750000000"}},
			wantType: typeRateLimit, wantRetryable: true, wantRule: "rate_limit"},
		{name: "the response's own Retriable: false", failure: &policydv1.Failure{HttpStatus: 429,
			Body: `{"error":{"code":"OperationNotAllowed","message":"Operation could not be completed. Retriable: false."}}`},
			wantType: typeRateLimit, wantRetryable: false, wantRule: "server.retryable-flag"},
		{name: "a name that says rate limit", failure: &policydv1.Failure{ErrorName: "StripeRateLimitError", Message: "Request rate limit exceeded"},
			wantType: typeRateLimit, wantRetryable: true, wantRule: "rate_limit"},
		{name: "not a throttle, though its name reads like one", failure: &policydv1.Failure{HttpStatus: 400, ErrorName: "NotAThrottlingError"},
			wantType: typeInvalidRequest, wantRetryable: false, wantRule: "invalid_request.400"},
		{name: "ErrorInfo quota_limit_value 0", failure: &policydv1.Failure{Provider: "google", HttpStatus: 429,
			Body: `{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","message":"Quota exceeded","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"RATE_LIMIT_EXCEEDED","metadata":{"quota_limit_value":"0"}}]}}`},
			wantType: typeQuota, wantRetryable: false, wantRule: "quota.daily"},
		{name: "a WebSocket closed with 1011", failure: &policydv1.Failure{ErrorName: "websockets.exceptions.ConnectionClosedError",
			Message: "received 1011 (internal error) Internal error occurred."},
			wantType: typeStreamCut, wantRetryable: true, wantRule: "websocket.closed"},
		{name: "a programming error under a cut stream", failure: &policydv1.Failure{ErrorName: "TypeError", Message: "terminated",
			Phase: policydv1.Phase_PHASE_MID_STREAM, Causes: []*policydv1.Cause{{Name: "TypeError", Code: "ERR_INVALID_ARG_TYPE"}}},
			wantType: typeInvalidRequest, wantRetryable: false, wantRule: "client.bug"},
		{name: "a 200 stream that ended without its last event", failure: &policydv1.Failure{HttpStatus: 200,
			Phase: policydv1.Phase_PHASE_MID_STREAM, Message: "The Responses stream did not produce a terminal event"},
			wantType: typeStreamCut, wantRetryable: true, wantRule: "network.mid_stream"},
		{name: "a plan's usage limit on a 429", failure: &policydv1.Failure{HttpStatus: 429,
			Body: `{"type":"error","error":{"type":"rate_limit_error","message":"Claude usage limit reached. Your limit will reset at 1pm."}}`},
			wantType: typeQuota, wantRetryable: false, wantRule: "quota.plan_limit"},
		{name: "OkHttp's call timeout as a cause", failure: &policydv1.Failure{ErrorName: "java.lang.RuntimeException", Message: "java.io.InterruptedIOException: timeout",
			Causes: []*policydv1.Cause{{Name: "java.io.InterruptedIOException", Message: "timeout"}}},
			wantType: typeTimeout, wantRetryable: true, wantRule: "timeout.signal"},
		{name: "untrusted certificate", failure: &policydv1.Failure{ErrorName: "TypeError", Message: "fetch failed",
			Causes: []*policydv1.Cause{{Name: "Error", Code: "UNABLE_TO_VERIFY_LEAF_SIGNATURE", Message: "unable to verify the first certificate"}}},
			wantType: typeConnection, wantRetryable: false, wantRule: "tls.certificate"},
	})
}

// A per-minute quota with no delay hint waits for its window; a hint, when
// there is one, wins.
func TestRuleWindowIsTheHintOfLastResort(t *testing.T) {
	t.Parallel()
	c := newTestClassifier(t)
	body := `{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","message":"Quota exceeded","details":[` +
		`{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaId":"GenerateRequestsPerMinutePerProjectPerModel"}]}%s]}}`
	got := c.Classify(&policydv1.Failure{Provider: "google", HttpStatus: 429, Body: fmtBody(body, "")}, nil, "")
	if got.GetRetryAfter().AsDuration() != time.Minute || got.GetRetryAfterSource() != "rule window" {
		t.Errorf("no hint: retry_after %v from %q, want 1m0s from the rule window", got.GetRetryAfter().AsDuration(), got.GetRetryAfterSource())
	}
	got = c.Classify(&policydv1.Failure{Provider: "google", HttpStatus: 429,
		Body: fmtBody(body, `,{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"44s"}`)}, nil, "")
	if got.GetRetryAfter().AsDuration() != 44*time.Second || got.GetRetryAfterSource() != "body field" {
		t.Errorf("RetryInfo 44s: retry_after %v from %q", got.GetRetryAfter().AsDuration(), got.GetRetryAfterSource())
	}
}

func fmtBody(format, extra string) string {
	for i := 0; i+1 < len(format); i++ {
		if format[i] == '%' && format[i+1] == 's' {
			return format[:i] + extra + format[i+2:]
		}
	}
	return format
}

// An HTTP-date Retry-After is measured against the response's Date header
// when there is one: the agent's clock may be skewed.
func TestRetryAfterDateAgainstServerDate(t *testing.T) {
	t.Parallel()
	c := newTestClassifier(t) // the agent's clock reads testNow
	serverNow := testNow.Add(-5 * time.Minute)
	f := &policydv1.Failure{HttpStatus: 503, Headers: map[string]string{
		"Date":        serverNow.Format(http.TimeFormat),
		"Retry-After": serverNow.Add(30 * time.Second).Format(http.TimeFormat),
	}}
	if got := c.Classify(f, nil, "").GetRetryAfter().AsDuration(); got != 30*time.Second {
		t.Errorf("with Date: retry_after %v, want 30s", got)
	}
	delete(f.Headers, "Date")
	if got := c.Classify(f, nil, "").GetRetryAfter(); got.AsDuration() != 0 {
		t.Errorf("without Date, a time 4.5 min in the agent's past: retry_after %v, want 0s", got.AsDuration())
	}
}

// The JVM's and .NET's HTTP clients name a connection the server closed
// before or while it answered in their own words; each is a network failure
// that a new connection can get past (blind-r10.yaml).
func TestJVMAndDotNetConnectionWords(t *testing.T) {
	t.Parallel()
	runClassifyCases(t, []classifyCase{
		{name: "JDK header parser received no bytes", failure: &policydv1.Failure{ErrorName: "java.io.IOException",
			Message: "HTTP/1.1 header parser received no bytes"},
			wantType: typeConnection, wantRetryable: true, wantRule: "network.connection"},
		{name: "JDK EOF reached while reading", failure: &policydv1.Failure{ErrorName: "java.io.EOFException",
			Message: "EOF reached while reading"},
			wantType: typeConnection, wantRetryable: true, wantRule: "network.connection"},
		{name: "JDK HTTP/2 GOAWAY received", failure: &policydv1.Failure{ErrorName: "java.io.IOException",
			Message: "/10.0.0.5:52122: GOAWAY received"},
			wantType: typeConnection, wantRetryable: true, wantRule: "network.connection"},
		{name: "OkHttp unexpected end of stream", failure: &policydv1.Failure{ErrorName: "java.io.IOException",
			Message: "unexpected end of stream on https://api.openai.com/..."},
			wantType: typeConnection, wantRetryable: true, wantRule: "network.connection"},
		{name: "Apache NoHttpResponseException by kind", failure: &policydv1.Failure{
			ErrorName: "org.apache.hc.core5.http.NoHttpResponseException", Message: "api.example.com:443 failed to respond"},
			wantType: typeConnection, wantRetryable: true, wantRule: "network.connection"},
		{name: "Apache HttpClient 4 text", failure: &policydv1.Failure{ErrorName: "IOException",
			Message: "The target server failed to respond"},
			wantType: typeConnection, wantRetryable: true, wantRule: "network.connection"},
		{name: "reactor-netty PrematureCloseException", failure: &policydv1.Failure{
			ErrorName: "reactor.netty.http.client.PrematureCloseException", Message: "Connection prematurely closed BEFORE response"},
			wantType: typeConnection, wantRetryable: true, wantRule: "network.connection"},
		{name: ".NET response ended prematurely as a cause", failure: &policydv1.Failure{ErrorName: "System.Net.Http.HttpRequestException",
			Message: "An error occurred while sending the request.",
			Causes:  []*policydv1.Cause{{Name: "System.Net.Http.HttpIOException", Message: "The response ended prematurely. (ResponseEnded)"}}},
			wantType: typeConnection, wantRetryable: true, wantRule: "network.connection"},
		{name: ".NET HTTP/2 stream reset", failure: &policydv1.Failure{ErrorName: "HttpRequestException",
			Message: "The HTTP/2 server reset the stream. HTTP/2 error code 'INTERNAL_ERROR' (0x2)."},
			wantType: typeConnection, wantRetryable: true, wantRule: "network.connection"},
		{name: "Windows connection refused", failure: &policydv1.Failure{ErrorName: "System.Net.Sockets.SocketException",
			Message: "No connection could be made because the target machine actively refused it. (localhost:11434)"},
			wantType: typeConnection, wantRetryable: true, wantRule: "network.connection"},
		{name: "the same words mid-stream are a cut stream", failure: &policydv1.Failure{Phase: policydv1.Phase_PHASE_MID_STREAM,
			ErrorName: "System.Net.Http.HttpIOException", Message: "The response ended prematurely. (ResponseEnded)"},
			wantType: typeStreamCut, wantRetryable: true, wantRule: "network.mid_stream"},
	})
}

// gemini-cli and its forks report a stream that finished with no text in
// their own words; the request is retried like any invalid stream.
func TestInvalidStreamEmptyResponseText(t *testing.T) {
	t.Parallel()
	runClassifyCases(t, []classifyCase{
		{name: "Qwen Code NO_RESPONSE_TEXT message", failure: &policydv1.Failure{ErrorName: "Error",
			Message: "Model stream ended with empty response text."},
			wantType: typeInvalidStream, wantRetryable: true, wantRule: "stream.invalid"},
	})
}

// A proxy that wants credentials refuses every attempt the same way, whatever
// stack reports its 407 and however the report reads; the connection-error
// wrapper around it must not make it look transient.
func TestProxyAuthenticationRequired(t *testing.T) {
	t.Parallel()
	runClassifyCases(t, []classifyCase{
		{name: "status 407", failure: &policydv1.Failure{HttpStatus: 407, Message: "Request failed with status code 407"},
			wantType: typeAuth, wantRetryable: false, wantRule: "proxy.auth_required"},
		{name: "requests ProxyError on a tunnel", failure: &policydv1.Failure{ErrorName: "requests.exceptions.ProxyError",
			Message: "HTTPSConnectionPool(host='api.openai.com', port=443): Max retries exceeded with url: /v1/chat/completions " +
				"(Caused by ProxyError('Cannot connect to proxy.', OSError('Tunnel connection failed: 407 Proxy Authentication Required')))"},
			wantType: typeAuth, wantRetryable: false, wantRule: "proxy.auth_required"},
		{name: "JDK tunnel", failure: &policydv1.Failure{ErrorName: "java.io.IOException",
			Message: `Unable to tunnel through proxy. Proxy returns "HTTP/1.1 407 Proxy Authentication Required"`},
			wantType: typeAuth, wantRetryable: false, wantRule: "proxy.auth_required"},
		{name: "curl CONNECT", failure: &policydv1.Failure{ErrorName: "curl", ErrorCode: "56",
			Message: "CONNECT tunnel failed, response 407"},
			wantType: typeAuth, wantRetryable: false, wantRule: "proxy.auth_required"},
	})
}
