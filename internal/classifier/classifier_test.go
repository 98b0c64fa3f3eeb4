package classifier

import (
	"strings"
	"testing"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

// x-should-retry overrides the status decision, both ways, but not an abort
// and not a failure without an HTTP response.
func TestShouldRetryHeaderOverrides(t *testing.T) {
	t.Parallel()
	h := func(v string) map[string]string { return map[string]string{"X-Should-Retry": v} }
	runClassifyCases(t, []classifyCase{
		{name: "false overrides 503", failure: &policydv1.Failure{HttpStatus: 503, Headers: h("false")},
			wantType: typeOverloaded, wantRetryable: false, wantRule: RuleShouldRetryHeader},
		{name: "true overrides 400", failure: &policydv1.Failure{HttpStatus: 400, Headers: h("true")},
			wantType: typeInvalidRequest, wantRetryable: true, wantRule: RuleShouldRetryHeader},
		{name: "true agrees with 429", failure: &policydv1.Failure{HttpStatus: 429, Headers: h("true")},
			wantType: typeRateLimit, wantRetryable: true, wantRule: "rate_limit"},
		{name: "garbage value ignored", failure: &policydv1.Failure{HttpStatus: 503, Headers: h("maybe")},
			wantType: typeOverloaded, wantRetryable: true, wantRule: "overloaded"},
		{name: "abort stays aborted", failure: &policydv1.Failure{HttpStatus: 503, ErrorName: "AbortError", Headers: h("true")},
			wantType: typeCanceled, wantRetryable: false, wantRule: "cancel.abort"},
		{name: "no response, no override", failure: &policydv1.Failure{ErrorCode: "ECONNRESET", Headers: h("false")},
			wantType: typeConnection, wantRetryable: true, wantRule: "network.connection"},
	})
	c := newTestClassifier(t)
	got := c.Classify(&policydv1.Failure{HttpStatus: 503, Headers: h("false")}, nil, "")
	if !strings.Contains(got.GetReason(), "overloaded") {
		t.Errorf("reason %q should name the overridden rule", got.GetReason())
	}
}

func TestGRPCCodes(t *testing.T) {
	t.Parallel()
	g := func(code int32) *policydv1.Failure { return &policydv1.Failure{GrpcCode: code} }
	runClassifyCases(t, []classifyCase{
		{name: "CANCELLED", failure: g(1), wantType: typeCanceled, wantRule: "cancel.abort"},
		{name: "DEADLINE_EXCEEDED", failure: g(4), wantType: typeTimeout, wantRetryable: true, wantRule: "timeout"},
		{name: "RESOURCE_EXHAUSTED", failure: g(8), wantType: typeRateLimit, wantRetryable: true, wantRule: "rate_limit"},
		{name: "UNAVAILABLE", failure: g(14), wantType: typeOverloaded, wantRetryable: true, wantRule: "overloaded"},
		{name: "INTERNAL", failure: g(13), wantType: typeServerError, wantRetryable: true, wantRule: "server_error"},
		{name: "UNAUTHENTICATED", failure: g(16), wantType: typeAuth, wantRule: "auth.invalid"},
		{name: "PERMISSION_DENIED", failure: g(7), wantType: typePermission, wantRule: "permission.denied"},
		{name: "INVALID_ARGUMENT", failure: g(3), wantType: typeInvalidRequest, wantRule: "invalid_request"},
		{name: "NOT_FOUND", failure: g(5), wantType: typeNotFound, wantRule: "not_found"},
		{name: "UNIMPLEMENTED", failure: g(12), wantType: typeUnsupported, wantRule: "unsupported"},
		{name: "UNKNOWN", failure: g(2), wantType: typeUnknown, wantRule: "unknown"},
	})
}

// Reason templates fill in the status.
func TestReasonTemplates(t *testing.T) {
	t.Parallel()
	c := newTestClassifier(t)
	got := c.Classify(&policydv1.Failure{HttpStatus: 409}, nil, "")
	if got.GetReason() != "HTTP 409: the server could not process the request now" {
		t.Errorf("reason = %q", got.GetReason())
	}
}

// Every built-in answer is deterministic: the same failure gives the same
// classification, from one call to the next and across classifiers.
func TestClassifyIsDeterministic(t *testing.T) {
	t.Parallel()
	f := &policydv1.Failure{HttpStatus: 429, Body: googleQuotaBody("PerMinute", "Please retry in 3s", "")}
	a := newTestClassifier(t).Classify(f, nil, "")
	for i := 0; i < 50; i++ {
		b := newTestClassifier(t).Classify(f, nil, "")
		if a.String() != b.String() {
			t.Fatalf("classification changed:\n%v\n%v", a, b)
		}
	}
}
