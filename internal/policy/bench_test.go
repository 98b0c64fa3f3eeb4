package policy

import (
	"math/rand/v2"
	"testing"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

// BenchmarkNextDelay measures a whole in-process decision: classifying an
// Anthropic 429 with retry-after, picking the default profile's strategy and
// deciding, as the NextDelay RPC does after validation.
func BenchmarkNextDelay(b *testing.B) {
	p := Builtin()
	req := &policydv1.NextDelayRequest{Attempt: 2, Failure: &policydv1.Failure{
		Provider: "anthropic", Operation: "chat", Method: "POST", HttpStatus: 429,
		Headers: map[string]string{"retry-after": "7", "content-type": "application/json"},
		Body:    `{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}`,
	}}
	r := rand.New(rand.NewPCG(1, 2))
	b.ReportAllocs()
	for b.Loop() {
		p.NextDelay(req, now, r)
	}
}
