package classifier

import (
	"testing"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

// Seed 000 (docs/seeds.md): the agent CLI's isRetryableError precedence table, row by row,
// under the agent_cli profile that reproduces it.
func TestSeed000PrecedenceTable(t *testing.T) {
	t.Parallel()
	cases := []classifyCase{
		// Row 1: AbortError is never retried, whatever else it carries.
		{name: "abort", failure: &policydv1.Failure{ErrorName: "AbortError", Message: "This operation was aborted"},
			wantType: typeCanceled, wantRetryable: false, wantRule: "cancel.abort"},
		{name: "abort beats network code", failure: &policydv1.Failure{ErrorName: "AbortError", Causes: nest(2, "Error", "ECONNRESET")},
			wantType: typeCanceled, wantRetryable: false, wantRule: "cancel.abort"},
		{name: "abort beats 503", failure: &policydv1.Failure{ErrorName: "AbortError", HttpStatus: 503},
			wantType: typeCanceled, wantRetryable: false, wantRule: "cancel.abort"},
		{name: "abort with fetch errors on", failure: &policydv1.Failure{ErrorName: "AbortError", Message: "fetch failed"}, options: fetchErrorsOn,
			wantType: typeCanceled, wantRetryable: false, wantRule: "cancel.abort"},

		// Row 2: a network code in .code or the .cause chain is always retried.
		{name: "ETIMEDOUT code, fetch errors off", failure: &policydv1.Failure{ErrorCode: "ETIMEDOUT"}, options: fetchErrorsOff,
			wantType: typeTimeout, wantRetryable: true, wantRule: "network.timeout"},
		{name: "ECONNRESET in nested cause", failure: &policydv1.Failure{ErrorName: "TypeError", Message: "fetch failed", Causes: nest(1, "Error", "ECONNRESET")},
			wantType: typeConnection, wantRetryable: true, wantRule: "network.connection"},
		{name: "network code 5 deep", failure: &policydv1.Failure{ErrorName: "FetchError", Causes: nest(5, "SocketError", "UND_ERR_SOCKET")},
			wantType: typeConnection, wantRetryable: true, wantRule: "network.connection"},
		{name: "network code 10 deep", failure: &policydv1.Failure{ErrorName: "FetchError", Causes: nest(10, "Error", "EPIPE")},
			wantType: typeConnection, wantRetryable: true, wantRule: "network.connection"},
		{name: "network code beats 400", failure: &policydv1.Failure{HttpStatus: 400, Causes: nest(0, "Error", "ECONNRESET")},
			wantType: typeConnection, wantRetryable: true, wantRule: "network.connection"},

		// Row 3: "fetch failed" is retried only when the caller opts in.
		{name: "fetch failed, opted in", failure: &policydv1.Failure{ErrorName: "TypeError", Message: "fetch failed"}, options: fetchErrorsOn,
			wantType: typeConnection, wantRetryable: true, wantRule: "fetch.failed.opt_in"},
		{name: "fetch failed, not opted in", failure: &policydv1.Failure{ErrorName: "TypeError", Message: "fetch failed"}, options: fetchErrorsOff,
			wantType: typeConnection, wantRetryable: false, wantRule: "fetch.failed"},
		{name: "fetch failed, no options", failure: &policydv1.Failure{ErrorName: "TypeError", Message: "TypeError: fetch failed"},
			wantType: typeConnection, wantRetryable: false, wantRule: "fetch.failed"},

		// Row 4: ApiError 400 is never retried.
		{name: "ApiError 400", failure: &policydv1.Failure{ErrorName: "ApiError", HttpStatus: 400, Message: "Bad Request"},
			wantType: typeInvalidRequest, wantRetryable: false, wantRule: "invalid_request.400"},
		{name: "400 with fetch errors on", failure: &policydv1.Failure{ErrorName: "ApiError", HttpStatus: 400}, options: fetchErrorsOn,
			wantType: typeInvalidRequest, wantRetryable: false, wantRule: "invalid_request.400"},

		// Row 5: ApiError 429 or 5xx is retried.
		{name: "ApiError 429", failure: &policydv1.Failure{ErrorName: "ApiError", HttpStatus: 429},
			wantType: typeRateLimit, wantRetryable: true, wantRule: "rate_limit"},
		{name: "ApiError 500", failure: &policydv1.Failure{ErrorName: "ApiError", HttpStatus: 500},
			wantType: typeServerError, wantRetryable: true, wantRule: "server_error"},
		{name: "ApiError 503", failure: &policydv1.Failure{ErrorName: "ApiError", HttpStatus: 503},
			wantType: typeOverloaded, wantRetryable: true, wantRule: "overloaded"},

		// Row 6: a generic status property 429 or 5xx is retried.
		{name: "status 429", failure: &policydv1.Failure{HttpStatus: 429}, wantType: typeRateLimit, wantRetryable: true, wantRule: "rate_limit"},
		{name: "status 502", failure: &policydv1.Failure{HttpStatus: 502}, wantType: typeServerError, wantRetryable: true, wantRule: "server_error"},
		{name: "status 504", failure: &policydv1.Failure{HttpStatus: 504}, wantType: typeTimeout, wantRetryable: true, wantRule: "timeout"},
		{name: "status 501", failure: &policydv1.Failure{HttpStatus: 501}, wantType: typeServerError, wantRetryable: true, wantRule: "agent_cli.status.5xx"},
		{name: "status 599", failure: &policydv1.Failure{HttpStatus: 599}, wantType: typeServerError, wantRetryable: true, wantRule: "server_error"},

		// Row 7: all other errors are not retried.
		{name: "status 404", failure: &policydv1.Failure{HttpStatus: 404}, wantType: typeNotFound, wantRetryable: false, wantRule: "not_found"},
		{name: "status 408", failure: &policydv1.Failure{HttpStatus: 408}, wantType: typeTimeout, wantRetryable: false, wantRule: "agent_cli.status.408"},
		{name: "status 409", failure: &policydv1.Failure{HttpStatus: 409}, wantType: typeInvalidRequest, wantRetryable: false, wantRule: "agent_cli.status.4xx"},
		{name: "status 302", failure: &policydv1.Failure{HttpStatus: 302}, wantType: typeUnknown, wantRetryable: false, wantRule: "status.other"},
		{name: "plain error", failure: &policydv1.Failure{ErrorName: "Error", Message: "something broke"},
			wantType: typeUnknown, wantRetryable: false, wantRule: RuleUnknown},
		{name: "empty failure", failure: &policydv1.Failure{}, wantType: typeUnknown, wantRetryable: false, wantRule: "unknown"},
	}
	for i := range cases {
		cases[i].profile = "agent_cli"
	}
	runClassifyCases(t, cases)
}

// Every network code seed 000's table covers (docs/seeds.md), at the top and 5 causes deep, with
// retry_fetch_errors off: always retried.
func TestSeed000NetworkCodes(t *testing.T) {
	t.Parallel()
	codes := []string{
		"ECONNRESET", "ETIMEDOUT", "EPIPE", "ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "EPROTO",
		"ERR_SSL_WRONG_VERSION_NUMBER", "ERR_SSL_DECRYPTION_FAILED_OR_BAD_RECORD_MAC",
		"ERR_SSL_SSLV3_ALERT_BAD_RECORD_MAC", "UND_ERR_SOCKET", "UND_ERR_CONNECT_TIMEOUT",
		"UND_ERR_HEADERS_TIMEOUT", "UND_ERR_BODY_TIMEOUT", "UND_ERR_CLOSED", "ERR_STREAM_PREMATURE_CLOSE",
	}
	var cases []classifyCase
	for _, code := range codes {
		want, rule := typeConnection, "network.connection"
		switch code {
		case "ETIMEDOUT", "UND_ERR_CONNECT_TIMEOUT", "UND_ERR_HEADERS_TIMEOUT", "UND_ERR_BODY_TIMEOUT":
			want, rule = typeTimeout, "network.timeout"
		}
		cases = append(cases,
			classifyCase{name: code + " in code", failure: &policydv1.Failure{ErrorCode: code}, options: fetchErrorsOff,
				wantType: want, wantRetryable: true, wantRule: rule},
			classifyCase{name: code + " 5 causes deep", failure: &policydv1.Failure{ErrorName: "TypeError", Message: "fetch failed", Causes: nest(4, "Error", code)},
				options: fetchErrorsOff, wantType: want, wantRetryable: true, wantRule: rule},
			classifyCase{name: code + " lower case", failure: &policydv1.Failure{Causes: nest(0, "", lower(code))},
				wantType: want, wantRetryable: true, wantRule: rule},
		)
	}
	runClassifyCases(t, cases)
}

// The Python and Go shapes of the same network failures.
func TestSeed000NetworkShapesOfOtherRuntimes(t *testing.T) {
	t.Parallel()
	runClassifyCases(t, []classifyCase{
		{name: "httpx ConnectError", failure: &policydv1.Failure{ErrorName: "ConnectError", Message: "[Errno 111] Connection refused"},
			wantType: typeConnection, wantRetryable: true, wantRule: "network.connection"},
		{name: "httpx ReadTimeout", failure: &policydv1.Failure{ErrorName: "ReadTimeout", Message: "The read operation timed out"},
			wantType: typeTimeout, wantRetryable: true, wantRule: "network.timeout"},
		{name: "httpx RemoteProtocolError", failure: &policydv1.Failure{ErrorName: "RemoteProtocolError", Message: "Server disconnected without sending a response."},
			wantType: typeConnection, wantRetryable: true, wantRule: "network.connection"},
		{name: "requests ConnectionError chain", failure: &policydv1.Failure{ErrorName: "ConnectionError",
			Causes: []*policydv1.Cause{{Name: "MaxRetryError"}, {Name: "NewConnectionError"}, {Name: "ConnectionRefusedError", Message: "[Errno 111] Connection refused"}}},
			wantType: typeConnection, wantRetryable: true, wantRule: "network.connection"},
		{name: "python ConnectionResetError cause", failure: &policydv1.Failure{ErrorName: "APIError", Causes: nest(3, "ConnectionResetError", "")},
			wantType: typeConnection, wantRetryable: true, wantRule: "network.connection"},
		{name: "go connection reset by peer", failure: &policydv1.Failure{Message: `Post "https://api.openai.com/v1/chat/completions": read tcp 10.0.0.2:51234->1.2.3.4:443: read: connection reset by peer`},
			wantType: typeConnection, wantRetryable: true, wantRule: "network.connection"},
		{name: "go unexpected EOF", failure: &policydv1.Failure{Message: `Post "https://api.anthropic.com/v1/messages": unexpected EOF`},
			wantType: typeConnection, wantRetryable: true, wantRule: "network.connection"},
		{name: "go GOAWAY", failure: &policydv1.Failure{Message: "http2: server sent GOAWAY and closed the connection; LastStreamID=1999, ErrCode=NO_ERROR"},
			wantType: typeConnection, wantRetryable: true, wantRule: "network.connection"},
		{name: "go context deadline exceeded", failure: &policydv1.Failure{Message: `Get "https://example.com": context deadline exceeded (Client.Timeout exceeded while awaiting headers)`},
			wantType: typeTimeout, wantRetryable: true, wantRule: "timeout.signal"},
		{name: "go context canceled", failure: &policydv1.Failure{Message: `Get "https://example.com": context canceled`},
			wantType: typeCanceled, wantRetryable: false, wantRule: "cancel.abort"},
		{name: "node socket hang up", failure: &policydv1.Failure{Message: "socket hang up", ErrorCode: "ECONNRESET"},
			wantType: typeConnection, wantRetryable: true, wantRule: "network.connection"},
		{name: "body text does not fake a network error", failure: &policydv1.Failure{HttpStatus: 404, Body: "<html>unexpected EOF in the page</html>"},
			wantType: typeNotFound, wantRetryable: false, wantRule: "not_found"},
	})
}

// Seed 000's streaming split: a network failure after the stream started is
// a cut stream; before, a connection error.
func TestSeed000StreamPhases(t *testing.T) {
	t.Parallel()
	runClassifyCases(t, []classifyCase{
		{name: "mid-stream ECONNRESET", failure: &policydv1.Failure{Operation: "chat.stream", Phase: policydv1.Phase_PHASE_MID_STREAM, ErrorCode: "ECONNRESET"},
			wantType: typeStreamCut, wantRetryable: true, wantRule: "network.mid_stream"},
		{name: "mid-stream go EOF", failure: &policydv1.Failure{Phase: policydv1.Phase_PHASE_MID_STREAM, Message: "unexpected EOF"},
			wantType: typeStreamCut, wantRetryable: true, wantRule: "network.mid_stream"},
		{name: "connect-phase ECONNREFUSED", failure: &policydv1.Failure{Operation: "chat.stream", Phase: policydv1.Phase_PHASE_CONNECT, ErrorCode: "ECONNREFUSED"},
			wantType: typeConnection, wantRetryable: true, wantRule: "network.connection"},
		{name: "mid-stream 400 is still a 400", failure: &policydv1.Failure{Phase: policydv1.Phase_PHASE_MID_STREAM, HttpStatus: 400},
			wantType: typeInvalidRequest, wantRetryable: false, wantRule: "invalid_request.400"},
	})
}

func lower(s string) string {
	b := appendLower(nil, s, len(s))
	return string(b)
}
