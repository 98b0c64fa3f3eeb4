package server

import (
	"strings"
	"testing"
	"time"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

// Parking through the real server: a client that reports parked calls gets
// the open breaker's park hint and, while it probes, a probe permit (a
// client without parked calls gets none); at the close each client holding
// parked calls gets a release slot: one at once, the other later.
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
	closed := func(a *policydv1.Assignment) bool {
		return a.GetBreaker() == policydv1.BreakerState_BREAKER_STATE_CLOSED
	}
	// The slots go in the order the clients' assignments are computed after
	// the close, and the two streams race for the first: whichever takes it
	// is released at once, the other later.
	later := func(a *policydv1.Assignment) bool {
		return closed(a) && a.GetHold().AsDuration() > 0 && strings.Contains(a.GetReason(), "parked calls released over")
	}
	if a := s.next("closed", closed); a.GetHold().AsDuration() == 0 {
		// Its parked calls reported (the report may reach the fleet after
		// the close), the second client gets a later slot.
		s2.next("closed, with a later release slot", later)
	} else if !later(a) {
		t.Fatalf("closed with a hold that is not a release slot: %v", a)
	} else {
		s2.next("closed, with the first release slot", func(a *policydv1.Assignment) bool {
			return closed(a) && a.GetHold().AsDuration() == 0
		})
	}
}
