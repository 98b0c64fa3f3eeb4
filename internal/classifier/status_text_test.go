package classifier

import (
	"strings"
	"testing"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

func TestStatusFromText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		text string
		want int32
	}{
		{"Error code: 429 - {'error': {'message': 'Rate limit reached'}}", 429},
		{"429 RESOURCE_EXHAUSTED. {'error': {'code': 429}}", 429},
		{"503 UNAVAILABLE. {'error': {'code': 503, 'message': 'The model is overloaded.'}}", 503},
		{"The remote server returned an error: (503) Server Unavailable.", 503},
		{"The remote server returned an error: (503) Service Unavailable.", 503},
		{"Bad response code, expected 200: {'status_code': 400, 'headers': {}}", 400},
		{"request failed with status code 502", 502},
		{"HTTP/1.1 504 Gateway Time-out", 504},
		{"listen tcp :4290: bind: address already in use", 0},
		{"retried 5000 times", 0},
		{"took 4291 ms", 0},
		{"error code: 200", 0},
		{"400 Request contains an invalid argument.", 400},
		{"500: Failed to parse messages", 500},
		{"wrapped\n404 page not found", 404},
		{"Google API error - [429] Quota exceeded", 429},
		{"The request failed: Google returned a response with code 429.", 429},
		{"error decoding response body: invalid type: integer `404`, expected struct X", 404},
		{"sent 429 bytes", 0},
		{"Server error '529 ' for url 'https://api.anthropic.com/v1/messages'", 529},
		{"Client error '429 Too Many Requests' for url 'https://x'", 429},
		{"Gemini error in batch 1: 500 An internal error has occurred.", 500},
		{"Invalid response object from API: '{\"message\":\"Unauthorized\"}' (HTTP response code was 401)", 401},
		{"HTTP code 403 from API (<html><title>403: Forbidden</title><body>403: Forbidden</body></html>)", 403},
		{"max_tokens: 500", 0},
		{"timeout: 500ms", 0},
		{"[4290] items", 0},
		{"<title>api.example.com | 522: Connection timed out</title>", 522},
		{"SSE error: Non-200 status code (500)", 500},
		{"This exception was thrown because the response has a status code of 503 and RequestOptions.validateStatus was configured to throw", 503},
		{"API Error (503 Too many connections, please wait before trying again.)", 503},
		{"api error (retry later)", 0},
		{"Not Found", 404},
		{"Too Many Requests.", 429},
		{"not found anywhere", 0},
		{"", 0},
	}
	for _, tt := range tests {
		if got := statusFromText([]byte(strings.ToLower(tt.text))); got != tt.want {
			t.Errorf("statusFromText(%q) = %d, want %d", tt.text, got, tt.want)
		}
	}
}

// A failure whose runtime lost the status but quotes it is classified by it;
// a real status always wins over the text.
func TestStatusQuotedInTheMessage(t *testing.T) {
	t.Parallel()
	runClassifyCases(t, []classifyCase{
		{name: "openai-python APIStatusError text", failure: &policydv1.Failure{ErrorName: "APIStatusError", Message: "Error code: 502 - {'error': 'bad gateway'}"},
			wantType: typeServerError, wantRetryable: true, wantRule: "server_error"},
		{name: "google-genai ClientError text", failure: &policydv1.Failure{ErrorName: "google.genai.errors.ClientError", Message: "400 INVALID_ARGUMENT. {'error': {'code': 400, 'message': 'Request contains an invalid argument.'}}"},
			wantType: typeInvalidRequest, wantRetryable: false, wantRule: "invalid_request.400"},
		{name: "the real status wins", failure: &policydv1.Failure{HttpStatus: 400, Message: "upstream said Error code: 503"},
			wantType: typeInvalidRequest, wantRetryable: false, wantRule: "invalid_request.400"},
	})
}
