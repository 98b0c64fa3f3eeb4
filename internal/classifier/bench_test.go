package classifier

import (
	"strings"
	"testing"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

// BenchmarkClassify measures one classification of a typical provider
// failure: a Gemini 429 with a ~1 KiB JSON body, headers and a cause chain.
// Target: ≤ 2 µs/op and ≤ 10 allocs/op.
func BenchmarkClassify(b *testing.B) {
	c := newTestClassifier(b)
	body := googleQuotaBody("GenerateRequestsPerMinutePerProjectPerModel", "Resource has been exhausted (e.g. check quota).", "20s")
	f := &policydv1.Failure{
		Provider: "google", Model: "gemini-2.5-pro", Operation: "chat", Method: "POST", HttpStatus: 429,
		Headers: map[string]string{"content-type": "application/json; charset=UTF-8", "date": "Sun, 22 Nov 2026 12:00:00 GMT",
			"server": "scaffolding on HTTPServer2", "x-content-type-options": "nosniff"},
		Body:      body,
		Message:   "got status: 429 Too Many Requests",
		ErrorName: "ApiError",
		Causes:    []*policydv1.Cause{{Name: "ClientError", Message: "429 RESOURCE_EXHAUSTED"}},
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		c.Classify(f, nil, "")
	}
}

// BenchmarkClassifyNetworkError measures a failure with no body: a fetch
// failure with a cause chain, the common agent-side case.
func BenchmarkClassifyNetworkError(b *testing.B) {
	c := newTestClassifier(b)
	f := &policydv1.Failure{ErrorName: "TypeError", Message: "fetch failed", Causes: nest(3, "SocketError", "UND_ERR_SOCKET")}
	b.ReportAllocs()
	for b.Loop() {
		c.Classify(f, nil, "")
	}
}

// BenchmarkClassifyUnrecognised measures a failure no rule recognises, with
// a ~1 KiB body, answered by the learned fallback: the path a new provider's
// failure takes.
func BenchmarkClassifyUnrecognised(b *testing.B) {
	c, err := New(DefaultRuleSet(), WithLearnedFallback(nil, DefaultProfile))
	if err != nil {
		b.Fatal(err)
	}
	body := `{"status":"failure","detail":{"reason":"the inference cluster has no free slot for this deployment",` +
		`"hint":"the scheduler will place the job when a slot frees up","cluster":"eu-west-4","queue_depth":118,` +
		`"trace":"` + strings.Repeat("ab12", 200) + `"}}`
	f := &policydv1.Failure{Provider: "acme", Operation: "chat", Body: body, Message: "deployment call did not complete", ErrorName: "AcmeError"}
	if got := c.Classify(f, nil, ""); got.GetRule() != RuleLearned {
		b.Fatalf("rule %q, want %q: pick a body no rule recognises", got.GetRule(), RuleLearned)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		c.Classify(f, nil, "")
	}
}
