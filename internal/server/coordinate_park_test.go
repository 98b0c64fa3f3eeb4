package server

import (
	"strings"
	"testing"
	"time"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

// Parking through the real server: a client that reports parked calls gets
// the open breaker's park hint and, while it probes, a probe permit (a
// client without parked calls gets none); at the close each gets a release
// slot: the first at once, the second later.
func TestCoordinateParkedCalls(t *testing.T) {
	h := newStreamHarness(t, streamTestPolicy)
	ctx := testContext(t)
	s := h.open(ctx, "agent-1")
	s.report(&policydv1.BucketUsage{Admitted: 20}) // 2 first attempts a second before the outage
	s.next("the first assignment", func(*policydv1.Assignment) bool { return true })
	s2 := h.open(ctx, "agent-2")
	s2.report(&policydv1.BucketUsage{Admitted: 1})
	s2.next("the first assignment", func(*policydv1.Assignment) bool { return true })

	for _, c := range []string{"b", "c", "b", "c"} {
		nextDelay(t, h.agents.policy(c), &policydv1.NextDelayRequest{ClientId: c, Attempt: 1,
			Failure: &policydv1.Failure{Provider: "openai", Model: "gpt-4o", HttpStatus: 503}})
	}
	a := s.next("breaker open", func(a *policydv1.Assignment) bool { return a.GetBreaker() == policydv1.BreakerState_BREAKER_STATE_OPEN })
	if hint := a.GetParkHint().AsDuration(); hint < 5*time.Second || hint > 7*time.Second {
		t.Fatalf("park hint %v, want the open period's 5 s and a probe interval", hint)
	}
	s.report(&policydv1.BucketUsage{Parked: 3, ParkedNew: 3})
	s2.next("open", func(a *policydv1.Assignment) bool { return a.GetBreaker() == policydv1.BreakerState_BREAKER_STATE_OPEN })

	h.clock.advance(5 * time.Second)
	s.next("a probe permit", func(a *policydv1.Assignment) bool {
		return a.GetBreaker() == policydv1.BreakerState_BREAKER_STATE_HALF_OPEN && a.GetProbePermits() == 1
	})
	s2.report(&policydv1.BucketUsage{Parked: 3, ParkedNew: 3})
	s2.next("half-open", func(a *policydv1.Assignment) bool {
		return a.GetBreaker() == policydv1.BreakerState_BREAKER_STATE_HALF_OPEN
	})
	s.report(&policydv1.BucketUsage{Admitted: 1, Released: 1, Succeeded: 2, Parked: 2})
	var held int
	for _, st := range []*testStream{s, s2} {
		a := st.next("closed", func(a *policydv1.Assignment) bool {
			return a.GetBreaker() == policydv1.BreakerState_BREAKER_STATE_CLOSED
		})
		if a.GetHold().AsDuration() > 0 && strings.Contains(a.GetReason(), "parked calls released over") {
			held++
		}
	}
	if held != 1 {
		t.Fatalf("%d of the two clients got a later release slot, want 1", held)
	}
}
