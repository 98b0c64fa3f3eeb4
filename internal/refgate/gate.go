// Package refgate is the reference fleet gate: the client side of fleet
// memory, one client process's gate for one target, as docs/clients.md ("The
// fleet gate") states it and clients/testdata/gate.json pins it. The three
// clients implement it in their languages; the simulation (internal/fleetsim)
// runs this one, and its vector test replays the shared vectors against it.
package refgate

import (
	"time"

	"github.com/policyd/policyd/internal/fleet"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

// Gate is one client process's gate for one target, as docs/clients.md
// ("The fleet gate") states it and clients/testdata/gate.json pins it: the
// three clients implement it in their languages, and the simulation runs
// this one. It is not safe for concurrent use.
type Gate struct {
	a          *Assignment
	receivedAt time.Time
	permits    uint32

	tokens   float64
	tokensAt time.Time

	// Admitted and Shed count first attempts; OwnAdmitted those admitted
	// past an expired assignment (policyd unreachable).
	Admitted, Shed, OwnAdmitted int64
}

// The gate's constants (docs/clients.md).
const (
	// Grace is how long an expired assignment is kept.
	Grace = 10 * time.Second
	// The process's own budget: gRPC A6's retry throttling, with a refill
	// by time so that a process that sends nothing tries again.
	ownMaxTokens   = 10.0
	ownThreshold   = ownMaxTokens / 2
	ownSuccessGain = 0.1
	ownRefill      = 0.1 // tokens a second
)

// Assignment is an assignment as the gate keeps it.
type Assignment struct {
	TTL           time.Duration
	Breaker       fleet.BreakerState
	Hold, Stop    time.Duration
	AdmitFraction float64
	ProbePermits  uint32
	Reason        string
	Fallback      *policydv1.Fallback
}

// Action is what the gate does with a first attempt.
type Action uint8

const (
	Admit Action = iota
	Wait
	FallBack
	Stop
)

// Verdict is the gate's answer.
type Verdict struct {
	Action Action
	Wait   time.Duration
	Probe  bool
	// StopReason says why a first attempt was not admitted.
	StopReason policydv1.StopReason
	Fallback   *policydv1.Fallback
	Reason     string
}

// New returns a gate with a full budget.
func New() *Gate { return &Gate{tokens: ownMaxTokens} }

// Assign receives a (nil: abandon).
func (g *Gate) Assign(now time.Time, a *Assignment) {
	g.a, g.receivedAt = a, now
	if a != nil {
		g.permits = a.ProbePermits
	}
}

// Assigned says whether the gate holds an assignment.
func (g *Gate) Assigned() bool { return g.a != nil }

// Age is the time since the assignment was received.
func (g *Gate) Age(now time.Time) time.Duration { return now.Sub(g.receivedAt) }

// Current is the assignment the gate holds (nil: none).
func (g *Gate) Current() *Assignment { return g.a }

// Record counts an attempt's outcome in the process's own budget.
func (g *Gate) Record(now time.Time, ok bool) {
	g.refill(now)
	if ok {
		g.tokens = min(ownMaxTokens, g.tokens+ownSuccessGain)
	} else {
		g.tokens = max(0, g.tokens-1)
	}
}

func (g *Gate) refill(now time.Time) {
	if !g.tokensAt.IsZero() {
		if dt := now.Sub(g.tokensAt); dt > 0 {
			g.tokens = min(ownMaxTokens, g.tokens+ownRefill*dt.Seconds())
		}
	}
	if now.After(g.tokensAt) {
		g.tokensAt = now
	}
}

// AllowRetry says whether a retry the client decided without policyd (its
// fail-open policy) may be sent: the process's own budget for the target
// has more than half its tokens (gRPC A6's retry throttling). It takes
// nothing; Record counts the attempt's outcome.
func (g *Gate) AllowRetry(now time.Time) bool {
	g.refill(now)
	return g.tokens > ownThreshold
}

// Check gates a first attempt: deadline is the time left before the
// caller's deadline (negative: none), draw uniform in [0, 1).
func (g *Gate) Check(now time.Time, deadline time.Duration, canFallBack bool, draw float64) Verdict {
	v := g.check(now, deadline, draw)
	if v.Action == Stop {
		g.Shed++
		if canFallBack && g.a != nil && g.a.Fallback != nil {
			v.Action, v.Fallback = FallBack, g.a.Fallback
		}
	} else {
		g.Admitted++
	}
	return v
}

func (g *Gate) check(now time.Time, deadline time.Duration, draw float64) Verdict {
	g.refill(now)
	a := g.a
	if a == nil {
		return Verdict{}
	}
	stop := func(r policydv1.StopReason) Verdict {
		return Verdict{Action: Stop, StopReason: r, Reason: a.Reason}
	}
	age := now.Sub(g.receivedAt)
	if age >= a.TTL+Grace {
		// policyd away never stops an agent: the process's own budget
		// limits its retries (AllowRetry), never its first attempts.
		g.OwnAdmitted++
		return Verdict{}
	}
	switch {
	case a.Stop > age:
		return stop(policydv1.StopReason_STOP_REASON_FLEET_STOP)
	case a.Breaker == fleet.Open:
		return stop(policydv1.StopReason_STOP_REASON_CIRCUIT_OPEN)
	case a.Breaker == fleet.HalfOpen:
		if g.permits > 0 {
			g.permits--
			return Verdict{Probe: true}
		}
		if draw < a.AdmitFraction {
			return Verdict{Probe: true}
		}
		return stop(policydv1.StopReason_STOP_REASON_CIRCUIT_OPEN)
	case a.AdmitFraction < 1 && draw >= a.AdmitFraction:
		return stop(policydv1.StopReason_STOP_REASON_FLEET_SHED)
	case a.Hold > age:
		left := a.Hold - age
		if deadline >= 0 && left > deadline {
			return stop(policydv1.StopReason_STOP_REASON_DEADLINE)
		}
		return Verdict{Action: Wait, Wait: left}
	}
	return Verdict{}
}
