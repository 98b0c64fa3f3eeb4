package classifier

import (
	"testing"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

// Seed 001 (docs/seeds.md): a stream that ends with no finish reason or no text is an invalid
// stream, retried with the continuation prompt "Please continue.".
func TestSeed001InvalidStream(t *testing.T) {
	t.Parallel()
	cases := []classifyCase{
		{name: "NO_FINISH_REASON", failure: &policydv1.Failure{ErrorName: "InvalidStreamError", ErrorCode: "NO_FINISH_REASON"}},
		{name: "NO_RESPONSE_TEXT", failure: &policydv1.Failure{ErrorName: "InvalidStreamError", ErrorCode: "NO_RESPONSE_TEXT"}},
		{name: "NO_FINISH_REASON_NO_TEXT", failure: &policydv1.Failure{ErrorName: "InvalidStreamError", ErrorCode: "NO_FINISH_REASON_NO_TEXT"}},
		{name: "code only", failure: &policydv1.Failure{ErrorCode: "NO_RESPONSE_TEXT", Operation: "chat.stream"}},
		{name: "name only", failure: &policydv1.Failure{ErrorName: "InvalidStreamError", Message: "Model stream ended without a finish reason."}},
		{name: "code in cause", failure: &policydv1.Failure{ErrorName: "Error", Causes: []*policydv1.Cause{{Name: "InvalidStreamError", Code: "NO_FINISH_REASON"}}}},
		{name: "agent_cli profile", profile: "agent_cli", failure: &policydv1.Failure{ErrorCode: "NO_FINISH_REASON"}},
	}
	for i := range cases {
		cases[i].wantType, cases[i].wantRetryable, cases[i].wantRule = typeInvalidStream, true, "stream.invalid"
	}
	runClassifyCases(t, cases)

	c := newTestClassifier(t)
	got := c.Classify(&policydv1.Failure{ErrorCode: "NO_FINISH_REASON"}, nil, "")
	if got.GetContinuationPrompt() != "Please continue." {
		t.Errorf("continuation_prompt = %q, want %q", got.GetContinuationPrompt(), "Please continue.")
	}
	other := c.Classify(&policydv1.Failure{HttpStatus: 503}, nil, "")
	if other.GetContinuationPrompt() != "" {
		t.Errorf("continuation_prompt on a 503 = %q, want none", other.GetContinuationPrompt())
	}
}
