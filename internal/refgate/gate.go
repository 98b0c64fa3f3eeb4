// Package refgate is the reference fleet gate: the client side of fleet
// memory, one client process's gate for one target, as docs/clients.md ("The
// fleet gate") states it and clients/testdata/gate.json pins it. The three
// clients implement it in their languages; the simulation (internal/fleetsim)
// runs this one, and its vector test replays the shared vectors against it.
package refgate

import (
	"fmt"
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

	// grants are the pace's grants not yet used, and grantCount the last
	// running count an assignment carried (fleet's grants.go), when
	// grantSeen.
	grants     uint64
	grantCount uint64
	grantSeen  bool

	// Target names the gate's target in a parked call's reason
	// ("openai/gpt-4o").
	Target string
	// ParkLimit bounds how long a call without a deadline may park:
	// 0 is DefaultParkLimit, negative turns parking off (a call the fleet
	// would park is not admitted at once, as before parking).
	ParkLimit time.Duration

	// Admitted and Shed count first attempts; OwnAdmitted those admitted
	// past an expired assignment (policyd unreachable); Parked the checks
	// that parked a call (a parked call's re-checks included); BatchFirst
	// the batch class's first attempts at their first check (admitted,
	// shed or parked); FellBack, of Shed, those sent to the assignment's
	// fallback.
	Admitted, Shed, OwnAdmitted, Parked int64
	BatchFirst, FellBack                int64

	// InFlight is the process's requests in flight on the target now: the
	// caller keeps it, and a first attempt waits while it is at the
	// assignment's lease.
	InFlight int
}

// Class is a call's priority class: when the fleet paces a target, batch
// first attempts yield to interactive ones.
type Class uint8

const (
	// Interactive is the default class: someone waits for the answer.
	Interactive Class = iota
	// Batch draws against the assignment's BatchAdmitFraction, when set.
	Batch
)

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

	// DefaultParkLimit is the longest a call without a deadline parks: two
	// of the breaker's longest open periods (60 s), so that a call outlives
	// an open period that doubled once, and a caller that gave no deadline
	// still gets an answer within two minutes.
	DefaultParkLimit = 2 * time.Minute
	// Recheck is how often a parked call is checked again when no
	// assignment arrives, and how often a call parked by a pace draws
	// again (the daemon counts each parked call as one draw a Recheck).
	Recheck = fleet.ParkRecheck
)

// Assignment is an assignment as the gate keeps it.
type Assignment struct {
	TTL           time.Duration
	Breaker       fleet.BreakerState
	Hold, Stop    time.Duration
	AdmitFraction float64
	// BatchAdmitFraction is the share of batch first attempts to admit
	// (nil: AdmitFraction for both classes).
	BatchAdmitFraction *float64
	// InFlightLease is the most requests the process may have in flight
	// on the target (nil: no cap).
	InFlightLease *uint32
	// PacePermits is the running count of first attempts the pace granted
	// this process (nil: a pace, if any, admits AdmitFraction by draws).
	PacePermits  *uint64
	ProbePermits uint32
	Reason       string
	Fallback     *policydv1.Fallback
	// ParkHint is the daemon's estimate of how long until the gate admits
	// again (0: unknown): a call whose deadline comes first does not park.
	ParkHint time.Duration
}

// Action is what the gate does with a first attempt.
type Action uint8

const (
	Admit Action = iota
	Wait
	FallBack
	Stop
	// Park: hold the call in the client (no attempt, no RPC) and Resume it
	// at each assignment for the target (earliest deadline first) and
	// every Recheck, until it is admitted or stopped.
	Park
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
	// Parked is the parked call to Resume (action Park); Waited how long
	// the call was parked before this verdict (Resume).
	Parked *Parked
	Waited time.Duration
	// BatchShare: a pace shed the call at the batch class's share;
	// AtLease: the process was at its lease of requests in flight.
	BatchShare, AtLease bool
	// ungranted: a pace with grants parked the call for want of one.
	ungranted bool
}

// Parked is a call the gate holds.
type Parked struct {
	// At is when it parked; Until when it must have an answer by (the
	// caller's deadline, or At + the park limit).
	At, Until   time.Time
	canFallBack bool
	class       Class
	drawAt      time.Time // when a pace's draw is due again
}

// New returns a gate with a full budget.
func New() *Gate { return &Gate{tokens: ownMaxTokens} }

// Assign receives a (nil: abandon).
func (g *Gate) Assign(now time.Time, a *Assignment) {
	g.a, g.receivedAt = a, now
	if a != nil {
		g.permits = a.ProbePermits
	}
	g.takeGrants(a)
}

// takeGrants adds the grants a's running count gives: its rise since the
// last count seen, or all of it when it went down (a new count, from
// another replica or a restarted one). The first count the gate sees
// grants nothing: it is what the daemon gave this client before (a gate
// made anew). A pace that ends takes the unused grants with it.
func (g *Gate) takeGrants(a *Assignment) {
	if a == nil || a.PacePermits == nil {
		g.grants = 0
		return
	}
	n := *a.PacePermits
	switch {
	case !g.grantSeen:
	case n >= g.grantCount:
		g.grants += n - g.grantCount
	default:
		g.grants += n
	}
	g.grantCount, g.grantSeen = n, true
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

// Check gates an interactive first attempt: deadline is the time left
// before the caller's deadline (negative: none), draw uniform in [0, 1).
func (g *Gate) Check(now time.Time, deadline time.Duration, canFallBack bool, draw float64) Verdict {
	return g.CheckClass(now, deadline, Interactive, canFallBack, draw)
}

// CheckClass gates a first attempt of class, as Check does.
func (g *Gate) CheckClass(now time.Time, deadline time.Duration, class Class, canFallBack bool, draw float64) Verdict {
	if class == Batch {
		g.BatchFirst++
	}
	v := g.check(now, deadline, draw, false, class)
	if v.Action == Park {
		limit := g.ParkLimit
		if limit == 0 {
			limit = DefaultParkLimit
		}
		until := now.Add(limit)
		if deadline >= 0 {
			until = now.Add(deadline)
		}
		switch {
		case canFallBack && g.a.Fallback != nil, limit < 0, !until.After(now.Add(g.hintLeft(now))):
			// Somewhere else to go, parking off, or no wait can fit: the
			// answer is now, as the cause says. A call that will not park
			// is never granted (grants go to parked calls): it draws
			// against the pace's share, as without grants.
			if v.ungranted {
				if v = g.checkDrawn(now, deadline, draw, class); v.Action != Park {
					break
				}
			}
			v.Action, v.Reason = Stop, g.a.Reason
		default:
			v.Parked = &Parked{At: now, Until: until, canFallBack: canFallBack, class: class, drawAt: now.Add(Recheck)}
			g.Parked++
			return v
		}
	}
	return g.count(v, canFallBack, class)
}

// CheckRetry gates a retry that NextDelay allowed, before it is sent: a
// stopped key stops it, an open breaker (or a probing one without a
// permit) parks it as a first attempt would be; otherwise it goes, after
// the wait the decision already gave. Retries are not counted as first
// attempts.
func (g *Gate) CheckRetry(now time.Time, deadline time.Duration) Verdict {
	v := g.check(now, deadline, 0, true, Interactive)
	switch v.Action {
	case Park:
		if v.StopReason == policydv1.StopReason_STOP_REASON_FLEET_SHED {
			return Verdict{} // a retry is paced by the daemon's budget, not the gate's share
		}
		until := now.Add(DefaultParkLimit)
		if g.ParkLimit > 0 {
			until = now.Add(g.ParkLimit)
		}
		if deadline >= 0 {
			until = now.Add(deadline)
		}
		if g.ParkLimit < 0 || !until.After(now.Add(g.hintLeft(now))) {
			return Verdict{Action: Stop, StopReason: v.StopReason, Reason: g.a.Reason}
		}
		v.Parked = &Parked{At: now, Until: until}
		return v
	case Wait:
		return Verdict{} // the decision's delay already waited out the cooldown
	}
	return v
}

// Resume checks a parked call again: admitted (Waited says how long it
// was parked), still parked, or stopped (DEADLINE) as soon as the time it
// has left is no longer than the fleet's estimate of the wait.
func (g *Gate) Resume(now time.Time, p *Parked, draw float64) Verdict {
	if now.Before(p.drawAt) {
		draw = 1 // a pace's draw is not due: only a full share admits
	} else {
		p.drawAt = now.Add(Recheck)
	}
	v := g.check(now, -1, draw, true, p.class)
	v.Waited = now.Sub(p.At)
	left := p.Until.Sub(now)
	switch v.Action {
	case Park:
		if left <= g.hintLeft(now) || left <= 0 {
			v = Verdict{Action: Stop, StopReason: policydv1.StopReason_STOP_REASON_DEADLINE, Waited: v.Waited,
				Reason: fmt.Sprintf("gave up waiting for the fleet after %v: %s", v.Waited.Round(time.Second), g.a.Reason)}
			return g.count(v, p.canFallBack, p.class)
		}
		v.Parked = p
		g.Parked++
		return v
	case Wait:
		if v.Wait > left {
			v = Verdict{Action: Stop, StopReason: policydv1.StopReason_STOP_REASON_DEADLINE, Waited: v.Waited, Reason: g.a.Reason}
		}
	}
	return g.count(v, p.canFallBack, p.class)
}

// count counts a verdict that is not Park, and turns a stop into the
// assignment's fallback when the caller can take it.
func (g *Gate) count(v Verdict, canFallBack bool, class Class) Verdict {
	if v.Action == Stop {
		g.Shed++
		if canFallBack && g.a != nil && g.a.Fallback != nil {
			v.Action, v.Fallback = FallBack, g.a.Fallback
			g.FellBack++
		}
	} else {
		g.Admitted++
		if g.a != nil && g.a.PacePermits != nil && g.grants > 0 {
			g.grants--
		}
	}
	return v
}

// share is the fraction of a's first attempts of class to admit.
func (a *Assignment) share(class Class) float64 {
	if class == Batch && a.BatchAdmitFraction != nil {
		return *a.BatchAdmitFraction
	}
	return a.AdmitFraction
}

// hintLeft is what is left of the assignment's park hint.
func (g *Gate) hintLeft(now time.Time) time.Duration {
	if g.a == nil {
		return 0
	}
	return max(0, g.a.ParkHint-now.Sub(g.receivedAt))
}

// parked is the verdict that parks a call for cause ("breaker open").
func (g *Gate) parked(now time.Time, r policydv1.StopReason, cause string) Verdict {
	why := fmt.Sprintf("waiting for the fleet: %s on %s", cause, g.Target)
	if h := g.hintLeft(now); h > 0 {
		why += fmt.Sprintf(", ~%d s", int(h.Round(time.Second)/time.Second))
	}
	return Verdict{Action: Park, StopReason: r, Reason: why}
}

// check is the gate's rule; resumed says the call is a parked one: it
// probes only with a permit, and an expired assignment lets it go while
// the process's own budget allows (the daemon that would wake it is away).
// A pace draws a call against its class's share.
func (g *Gate) check(now time.Time, deadline time.Duration, draw float64, resumed bool, class Class) Verdict {
	return g.decide(now, deadline, draw, resumed, class, false)
}

// checkDrawn is check for a first attempt that will not park, under a pace
// with grants: it draws against the pace's share instead.
func (g *Gate) checkDrawn(now time.Time, deadline time.Duration, draw float64, class Class) Verdict {
	return g.decide(now, deadline, draw, false, class, true)
}

// decide is check's rule; drawn: a pace with grants draws (checkDrawn).
func (g *Gate) decide(now time.Time, deadline time.Duration, draw float64, resumed bool, class Class, drawn bool) Verdict {
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
		return g.parked(now, policydv1.StopReason_STOP_REASON_CIRCUIT_OPEN, "breaker open")
	case a.Breaker == fleet.HalfOpen:
		if g.permits > 0 {
			g.permits--
			return Verdict{Probe: true}
		}
		if !resumed && draw < a.AdmitFraction {
			return Verdict{Probe: true}
		}
		return g.parked(now, policydv1.StopReason_STOP_REASON_CIRCUIT_OPEN, "breaker probing")
	case a.PacePermits != nil && g.grants == 0 && !drawn:
		v := g.parked(now, policydv1.StopReason_STOP_REASON_FLEET_SHED, "paced")
		v.ungranted = true
		return v
	case (a.PacePermits == nil || drawn) && a.share(class) < 1 && draw >= a.share(class):
		v := g.parked(now, policydv1.StopReason_STOP_REASON_FLEET_SHED, "paced")
		v.BatchShare = class == Batch && a.BatchAdmitFraction != nil
		return v
	case a.InFlightLease != nil && g.InFlight >= int(*a.InFlightLease):
		v := g.parked(now, policydv1.StopReason_STOP_REASON_FLEET_SHED, "at its lease of requests in flight")
		v.AtLease = true
		return v
	case a.Hold > age:
		left := a.Hold - age
		if deadline >= 0 && left > deadline {
			return stop(policydv1.StopReason_STOP_REASON_DEADLINE)
		}
		return Verdict{Action: Wait, Wait: left}
	}
	return Verdict{}
}

// Cancel takes a parked call the caller cancelled out of the park: it
// counts as shed.
func (g *Gate) Cancel(*Parked) {
	g.Shed++
}
