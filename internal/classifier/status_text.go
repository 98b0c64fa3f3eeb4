package classifier

import "bytes"

// A failure that reached policyd without its HTTP status often still quotes
// it in its message: openai-python's "Error code: 429 - {...}", google-genai's
// "429 RESOURCE_EXHAUSTED. {...}", botocore's "(503) Service Unavailable",
// a proxy's "Bad response code, expected 200: {'status_code': 400". When
// http_status is 0, rules see the status the runtime message states, so the
// status rules decide instead of "no rule matched".

// statusPrefixes are the lower-case phrases a status number follows.
var statusPrefixes = [][]byte{
	[]byte("error code: "),
	[]byte("status code: "),
	[]byte("status code "),
	// The MCP SDK's "SSE error: Non-200 status code (500)", dio's "the
	// response has a status code of 503", Claude Code's "API Error (503 Too
	// many connections, ...)". (SageMaker's "Received server error (500)
	// from model" is the customer container's status: a rule reads it.)
	[]byte("status code ("),
	[]byte("status code of "),
	[]byte("api error ("),
	[]byte("status_code: "),
	[]byte("status_code="),
	[]byte("'status_code': "),
	[]byte("\"status_code\": "),
	[]byte("statuscode: "),
	[]byte("statuscode="),
	[]byte("http status "),
	[]byte("http status: "),
	[]byte("got status: "),
	[]byte("http error "),
	// openai-python 0.x's APIError: "HTTP code 403 from API (<html>...)".
	[]byte("http code "),
	[]byte("http/1.1 "),
	[]byte("http/2 "),
	[]byte("api error: "),
	// langchain-mistralai's "Error response 401 while fetching https://...".
	[]byte("error response "),
	// "Error 400 (Bad Request)", "API error 429", .NET's "Response status
	// code does not indicate success: 429 (Too Many Requests)", Java's
	// "Server returned HTTP response code: 503", Ollama's "(status code: 400)".
	[]byte("error "),
	[]byte("does not indicate success: "),
	// openai-python 0.x's APIError: "Invalid response object from API:
	// '...' (HTTP response code was 401)".
	[]byte("response code was "),
	[]byte("http response code: "),
	[]byte("status: "),
	[]byte("status="),
	[]byte("http_status="),
	[]byte("status "),
	[]byte("returned "),
	[]byte("responded with "),
	[]byte("non-2xx: "),
	[]byte("server error: "),
	// httpx's HTTPStatusError: "Server error '529 ' for url '...'",
	// "Client error '429 Too Many Requests' for url '...'".
	[]byte("server error '"),
	[]byte("client error '"),
	// "Google returned a response with code 429", "HTTP response code 503",
	// serde's "invalid type: integer `404`" (a body that is a bare status).
	[]byte("with code "),
	[]byte("response code "),
	[]byte("invalid type: integer `"),
	// "Error: 429 status code (no body)", "HTTP 429: rate limited", "code: 503".
	[]byte("error: "),
	[]byte("http "),
	[]byte("code: "),
	[]byte("code="),
}

// reasonPhrases are what follows a bare status number: HTTP reason phrases
// and gRPC/Google status names, lower case.
var reasonPhrases = [][]byte{
	[]byte("too many requests"), []byte("service unavailable"), []byte("server unavailable"), []byte("bad gateway"), []byte("gateway timeout"),
	[]byte("gateway time-out"), []byte("internal server error"), []byte("unauthorized"), []byte("forbidden"),
	[]byte("not found"), []byte("bad request"), []byte("request timeout"), []byte("payload too large"),
	[]byte("request entity too large"), []byte("unprocessable entity"), []byte("conflict"),
	[]byte("resource_exhausted"), []byte("unavailable"), []byte("internal"), []byte("permission_denied"),
	[]byte("unauthenticated"), []byte("invalid_argument"), []byte("not_found"), []byte("deadline_exceeded"),
	[]byte("failed_precondition"), []byte("quota exceeded"), []byte("overloaded"),
	[]byte("not implemented"), []byte("http version not supported"), []byte("variant also negotiates"),
	[]byte("insufficient storage"), []byte("loop detected"), []byte("not extended"),
	[]byte("network authentication required"), []byte("precondition failed"), []byte("gone"),
	[]byte("method not allowed"), []byte("payment required"), []byte("too early"), []byte("locked"),
	[]byte("misdirected request"), []byte("request header fields too large"), []byte("client closed request"),
	[]byte("unsupported media type"), []byte("not acceptable"), []byte("proxy authentication required"),
	[]byte("cancelled"), []byte("aborted"), []byte("already_exists"), []byte("unimplemented"),
	[]byte("out_of_range"), []byte("data_loss"), []byte("resource exhausted"),
}

// statusFromText returns the first 4xx or 5xx status that lower-case text
// states, or 0. One pass over the text: only a three-digit 4xx or 5xx number
// is looked at more closely, so a message without one costs a scan.
func statusFromText(text []byte) int32 {
	if s := statusFromReason(text); s != 0 {
		return s
	}
	return statusInText(text, false)
}

// status4xxFromText returns the first 4xx status that lower-case text
// states, past any 5xx it states before it, or 0.
func status4xxFromText(text []byte) int32 {
	if s := statusFromReason(text); s >= 400 && s <= 499 {
		return s
	}
	return statusInText(text, true)
}

// statusInText is statusFromText's scan; only4xx skips stated 5xx statuses.
func statusInText(text []byte, only4xx bool) int32 {
	for i := 0; i+3 <= len(text); i++ {
		if c := text[i]; c != '4' && c != '5' {
			continue
		}
		if i > 0 && text[i-1] >= '0' && text[i-1] <= '9' {
			continue
		}
		s, ok := threeDigits(text[i:])
		if !ok || (only4xx && s >= 500) {
			continue
		}
		before := text[:i]
		for _, p := range statusPrefixes {
			if bytes.HasSuffix(before, p) {
				return s
			}
		}
		// A message that starts with its status, as google.api_core's and
		// the Python SDKs' exceptions print it ("400 Request contains an
		// invalid argument.", "500: Failed to parse messages"), or a status
		// in brackets ("Google API error - [429] Quota exceeded").
		if len(text) > i+3 && (text[i+3] == ' ' || text[i+3] == ':') && (i == 0 || text[i-1] == '\n') {
			return s
		}
		// The same message behind a wrapper's prefix ("Gemini error in
		// batch 1: 500 An internal error has occurred."): a status that
		// opens the clause after ": " and is followed by words.
		if i >= 2 && text[i-2] == ':' && text[i-1] == ' ' && len(text) > i+4 && text[i+3] == ' ' && text[i+4] >= 'a' && text[i+4] <= 'z' {
			return s
		}
		if i > 0 && text[i-1] == '[' && len(text) > i+3 && text[i+3] == ']' {
			return s
		}
		// Cloudflare's error page title: "<title>api.example.com | 520:
		// Web server is returning an unknown error</title>".
		if i >= 2 && text[i-2] == '|' && text[i-1] == ' ' && len(text) > i+4 && text[i+3] == ':' && text[i+4] == ' ' {
			return s
		}
		// "429 Too Many Requests", "(503) Service Unavailable", "429 RESOURCE_EXHAUSTED".
		rest := bytes.TrimPrefix(text[i+3:], []byte(")"))
		if len(rest) < 2 || rest[0] != ' ' {
			continue
		}
		rest = rest[1:]
		for _, r := range reasonPhrases {
			if bytes.HasPrefix(rest, r) {
				return s
			}
		}
	}
	return 0
}

// statusCode reads an error code that is an HTTP status, as SDKs that copy
// the response's status into the error's code write it (openai-node v3's
// code: '401', Semantic Kernel's ErrorCode: 429): exactly three digits, 4xx
// or 5xx. Else 0: errno values (104) and WebSocket close codes (1006) are
// not statuses.
func statusCode(code string) int32 {
	if len(code) != 3 {
		return 0
	}
	s, _ := threeDigits([]byte(code))
	return s
}

// threeDigits reads a 4xx or 5xx status at the start of b, not followed by
// another digit.
func threeDigits(b []byte) (int32, bool) {
	if len(b) < 3 || (b[0] != '4' && b[0] != '5') {
		return 0, false
	}
	for i := 0; i < 3; i++ {
		if b[i] < '0' || b[i] > '9' {
			return 0, false
		}
	}
	if len(b) > 3 && b[3] >= '0' && b[3] <= '9' {
		return 0, false
	}
	return int32(b[0]-'0')*100 + int32(b[1]-'0')*10 + int32(b[2]-'0'), true
}

// reasonStatuses are the statuses a message that is nothing but a reason
// phrase stands for ("Not Found", "Too Many Requests"): a runtime that
// dropped the number kept its words.
var reasonStatuses = map[string]int32{
	"bad request": 400, "unauthorized": 401, "forbidden": 403, "not found": 404, "request timeout": 408,
	"conflict": 409, "payload too large": 413, "unprocessable entity": 422, "too many requests": 429,
	"internal server error": 500, "bad gateway": 502, "service unavailable": 503, "gateway timeout": 504,
}

// statusFromReason returns the status of a lower-case text that is only a
// reason phrase, or 0.
func statusFromReason(text []byte) int32 {
	t := bytes.TrimSpace(bytes.TrimRight(text, "."))
	if len(t) < 8 || len(t) > 21 {
		return 0
	}
	return reasonStatuses[string(t)]
}
