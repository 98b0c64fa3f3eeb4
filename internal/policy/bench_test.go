package policy

import (
	"math/rand/v2"
	"testing"
	"time"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/fleet"
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

// BenchmarkNextDelayFleet is BenchmarkNextDelay with fleet memory: every
// decision records the failure, takes a release slot of the shared
// cooldown its hint set, and renders the bucket's state.
func BenchmarkNextDelayFleet(b *testing.B) {
	p := Builtin()
	req := &policydv1.NextDelayRequest{Attempt: 2, Failure: &policydv1.Failure{
		Provider: "anthropic", Model: "claude-sonnet-4-5", KeyId: "bench", Operation: "chat", Method: "POST", HttpStatus: 429,
		Headers: map[string]string{"retry-after": "7", "content-type": "application/json"},
		Body:    `{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}`,
	}}
	r := rand.New(rand.NewPCG(1, 2))
	f := fleet.New(p.Fleet, fleet.WithClock(func() time.Time { return now }))
	b.ReportAllocs()
	for b.Loop() {
		p.Decide(req, Call{Now: now, Rand: r, Profile: DefaultProfile, Fleet: f, ClientID: "bench"})
	}
}
