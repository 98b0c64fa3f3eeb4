package policy

import (
	"time"

	"testing"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/fleet"
)

// Every agent of a bucket gets the same judgement of a shared cooldown above
// its profile's hint ceiling: an agent whose own hint is short, meeting the
// cooldown another agent's long hint set, gets the answer that long hint
// would get under its own profile (SERVER_DELAY_ABOVE_CEILING, stop or fall
// back), not a DEADLINE it never gave. The cooldown itself is capped by the
// first agent's own ceiling (a patient profile here), so that one caller
// cannot hold the others longer than it would wait itself; under the same
// profile a hint above the ceiling sets no cooldown above it, and the second
// agent's retry fits its ceiling.
func TestSharedCooldownAboveCeilingIsOneJudgement(t *testing.T) {
	t.Parallel()
	p, err := Parse([]byte(`
profiles:
  patient:
    extends: default
    strategies:
      RATE_LIMIT: {retry: true, max_attempts: 5, backoff: constant, initial_delay: 1s, honor_retry_after: true,
                   retry_after_ceiling: 10m, fallback: other_provider}
`), "patient.yaml", Caps{})
	if err != nil {
		t.Fatal(err)
	}
	ceiling := p.Profiles[DefaultProfile].Strategies[policydv1.FailureType_FAILURE_TYPE_RATE_LIMIT].RetryAfterCeiling
	if ceiling <= 0 || ceiling >= 4*time.Minute {
		t.Fatalf("the default profile's hint ceiling for rate limits is %v, want under the 4 min hint", ceiling)
	}
	f429 := func(retryAfter string) *policydv1.Failure {
		return &policydv1.Failure{Provider: "openai", Model: "gpt-4o", KeyId: "k", Operation: "chat", HttpStatus: 429,
			Headers: map[string]string{"retry-after": retryAfter}}
	}
	decide := func(fl *fleet.Fleet, client, profile, retryAfter string) *policydv1.Decision {
		return p.Decide(&policydv1.NextDelayRequest{Failure: f429(retryAfter), Attempt: 1, Profile: profile},
			Call{Now: now, Rand: fixedRand(0.5), Profile: profile, Fleet: fl, ClientID: client})
	}
	const long = "240" // 4 minutes: within the patient profile's ceiling, above the default's
	alone := decide(fleet.New(fleet.Defaults(), fleet.WithClock(func() time.Time { return now })), "x", DefaultProfile, long)
	if alone.GetStopReason() != policydv1.StopReason_STOP_REASON_SERVER_DELAY_ABOVE_CEILING {
		t.Fatalf("a default agent's own 4 min hint: %v %v", alone.GetAction(), alone.GetStopReason())
	}

	fl := fleet.New(fleet.Defaults(), fleet.WithClock(func() time.Time { return now }))
	if first := decide(fl, "a", "patient", long); first.GetAction() != policydv1.Action_ACTION_RETRY {
		t.Fatalf("the patient agent: %v %v, want a retry after its hint", first.GetAction(), first.GetStopReason())
	}
	second := decide(fl, "b", DefaultProfile, "1")
	if second.GetAction() != alone.GetAction() || second.GetStopReason() != alone.GetStopReason() {
		t.Errorf("second agent under the shared cooldown: %v %v (%s); its own long hint: %v %v",
			second.GetAction(), second.GetStopReason(), second.GetFleet().GetReason(), alone.GetAction(), alone.GetStopReason())
	}

	// Under one profile: the long hint sets no cooldown above the ceiling.
	fl = fleet.New(fleet.Defaults(), fleet.WithClock(func() time.Time { return now }))
	decide(fl, "a", DefaultProfile, long)
	if d := decide(fl, "b", DefaultProfile, "1"); d.GetAction() != policydv1.Action_ACTION_RETRY || d.GetDelay().AsDuration() > ceiling+ceiling/10 {
		t.Errorf("second agent of one profile: %v %v after %v, want a retry within the ceiling %v", d.GetAction(), d.GetStopReason(), d.GetDelay().AsDuration(), ceiling)
	}
}
