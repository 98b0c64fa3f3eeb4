package policy

import (
	"fmt"
	"time"

	"testing"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/fleet"
)

// Every agent of a bucket gets the same judgement of a cooldown above the
// profile's hint ceiling: the first agent's hint stops (or falls back) as
// SERVER_DELAY_ABOVE_CEILING; a second agent whose own hint is short meets
// the shared cooldown the first hint set, and gets the same answer, not a
// DEADLINE it never gave.
func TestSharedCooldownAboveCeilingIsOneJudgement(t *testing.T) {
	t.Parallel()
	p := Builtin()
	ceiling := p.Profiles[DefaultProfile].Strategies[policydv1.FailureType_FAILURE_TYPE_RATE_LIMIT].RetryAfterCeiling
	if ceiling <= 0 {
		t.Fatal("the default profile has no hint ceiling for rate limits")
	}
	f429 := func(retryAfter string) *policydv1.Failure {
		return &policydv1.Failure{Provider: "openai", Model: "gpt-4o", KeyId: "k", Operation: "chat", HttpStatus: 429,
			Headers: map[string]string{"retry-after": retryAfter}}
	}
	tests := []struct {
		name string
	}{
		{name: "no deadline"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fl := fleet.New(fleet.Defaults(), fleet.WithClock(func() time.Time { return now }))
			call := func(client, retryAfter string) *policydv1.Decision {
				return p.Decide(&policydv1.NextDelayRequest{Failure: f429(retryAfter), Attempt: 1},
					Call{Now: now, Rand: fixedRand(0.5), Profile: DefaultProfile, Fleet: fl, ClientID: client})
			}
			first := call("a", fmt.Sprint(int((2 * ceiling).Seconds())))
			second := call("b", "1")
			if first.GetStopReason() != policydv1.StopReason_STOP_REASON_SERVER_DELAY_ABOVE_CEILING {
				t.Fatalf("first agent: %v %v (%s)", first.GetAction(), first.GetStopReason(), first.GetFleet().GetReason())
			}
			if second.GetAction() != first.GetAction() || second.GetStopReason() != first.GetStopReason() {
				t.Errorf("second agent: %v %v, first: %v %v", second.GetAction(), second.GetStopReason(), first.GetAction(), first.GetStopReason())
			}
		})
	}
}
