package policyd

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	policydv1 "github.com/policyd/policyd/clients/go/internal/gen/policyd/v1"
)

// The fleet gate (docs/clients.md, "The fleet gate"): a table of the
// assignments the Coordinate stream delivers, keyed by target, that every
// first attempt of a call naming a provider is checked against before it
// is sent. A check is a map lookup and a few counters under one mutex,
// never an RPC. clients/testdata/gate.json pins its answers.

// DefaultGateGrace is how long the gate keeps an assignment past its time
// to live (policyd unreachable) before it admits every first attempt
// instead; WithGateGrace changes it.
const DefaultGateGrace = 10 * time.Second

// The process's own budget per target: gRPC A6's retry throttling, with a
// refill by time so that a process that sends nothing tries again.
const (
	ownMaxTokens   = 10.0
	ownThreshold   = ownMaxTokens / 2
	ownSuccessGain = 0.1
	ownRefill      = 0.1 // tokens a second
)

// Limits that keep the table and the reports small whatever callers do.
const (
	maxGateTargets   = 1024 // as policyd per stream; a call on a target beyond these is not gated nor reported
	maxRateLimits    = 16
	maxRateLimitByte = 64
	// maxCallInputTokens bounds one call's input tokens in a report, as
	// policyd bounds them (BucketUsage's token counts).
	maxCallInputTokens = 2_000_000
)

// target is what the gate keys its table by: a call's provider (lower
// case, as policyd reads it), model and key id, clipped to what policyd
// accepts.
type target struct{ provider, model, keyID string }

func targetOf(call Call) (target, bool) {
	if call.Provider == "" {
		return target{}, false
	}
	return target{
		provider: strings.ToLower(clip(call.Provider, maxFieldBytes)),
		model:    clip(call.Model, maxFieldBytes),
		keyID:    clip(call.KeyID, maxLabelBytes),
	}, true
}

func (t target) String() string {
	s := t.provider
	if t.model != "" {
		s += "/" + t.model
	}
	if t.keyID != "" {
		s += "@" + t.keyID
	}
	return s
}

func (t target) proto() *policydv1.BucketTarget {
	return &policydv1.BucketTarget{Provider: t.provider, Model: t.model, KeyId: t.keyID}
}

// assignment is an Assignment as the gate keeps it: durations from receipt.
type assignment struct {
	ttl, hold, stop time.Duration
	breaker         policydv1.BreakerState
	admitFraction   float64
	// batchAdmitFraction is the batch class's share when hasBatchFraction;
	// otherwise batch calls draw against admitFraction too.
	batchAdmitFraction float64
	hasBatchFraction   bool
	// inFlightLease is the most requests the process may have in flight
	// on the target, when leased; first attempts past it park.
	inFlightLease uint32
	leased        bool
	// pacePermits is the running count of first attempts the pace granted
	// the process, when hasPacePermits: first attempts go only against
	// grants not yet used (docs/clients.md, "Grants"); otherwise a pace
	// admits admitFraction of them by draws.
	pacePermits    uint64
	hasPacePermits bool
	probePermits   uint32
	reason         string
	fallback       *gateFallback
	// parkHint is the daemon's estimate of how long until the gate admits
	// again (0: unknown): a call whose deadline comes first does not park.
	parkHint time.Duration
}

// gateFallback is an assignment's fallback.
type gateFallback struct {
	kind            FallbackKind
	provider, model string
	reason          string
}

// assignmentFromProto converts what the stream delivers; out-of-range
// values are clamped rather than trusted.
func assignmentFromProto(pa *policydv1.Assignment) *assignment {
	a := &assignment{
		ttl:           max(0, pa.GetTtl().AsDuration()),
		hold:          max(0, pa.GetHold().AsDuration()),
		stop:          max(0, pa.GetStop().AsDuration()),
		breaker:       pa.GetBreaker(),
		admitFraction: pa.GetAdmitFraction(),
		probePermits:  pa.GetProbePermits(),
		reason:        clip(pa.GetReason(), maxFieldBytes),
		parkHint:      max(0, pa.GetParkHint().AsDuration()),
	}
	a.admitFraction = clampFraction(a.admitFraction)
	if pa.BatchAdmitFraction != nil {
		a.batchAdmitFraction, a.hasBatchFraction = clampFraction(pa.GetBatchAdmitFraction()), true
	}
	if pa.InFlightLease != nil {
		a.inFlightLease, a.leased = pa.GetInFlightLease(), true
	}
	if pa.PacePermits != nil {
		a.pacePermits, a.hasPacePermits = pa.GetPacePermits(), true
	}
	if fb := pa.GetFallback(); fb != nil && (fb.GetKind() != policydv1.FallbackKind_FALLBACK_KIND_UNSPECIFIED || fb.GetProvider() != "" || fb.GetModel() != "") {
		a.fallback = &gateFallback{kind: FallbackKind(fb.GetKind()), provider: fb.GetProvider(), model: fb.GetModel(), reason: fb.GetReason()}
	}
	return a
}

// clampFraction keeps a share within [0, 1]; NaN names no limit.
func clampFraction(f float64) float64 {
	switch {
	case f != f:
		return 1
	case f < 0:
		return 0
	case f > 1:
		return 1
	}
	return f
}

// usage is a target's counts since its last report.
type usage struct {
	admitted, shed, succeeded, failed, retries uint64
	// fellBack counts, of shed, the first attempts sent to the
	// assignment's fallback.
	fellBack uint64
	// parkChecks counts the checks that parked a call, re-checks included;
	// parkedNew the first attempts parked at their first check; released
	// the parked calls admitted (also in admitted).
	parkChecks, parkedNew, released uint64
	// batchFirst counts the batch class's first attempts at their first
	// check (admitted, shed or parked).
	batchFirst uint64
	// The input tokens the calls carried (the caller's count, else the
	// transport's estimate): of first attempts at their first check, and
	// of retries sent.
	firstInputTokens, retryInputTokens uint64
	// The input tokens the responses said their calls used, where the
	// transport read them, and those calls' estimates (as counted above).
	inputTokensUsed, inputTokensEstimatedForUsed uint64
	// The output tokens the responses said their calls produced, where the
	// transport read them, and how many calls those were.
	outputTokensUsed, outputTokensUsedCalls uint64
	rateLimits                              map[string]string // the last response's, nil: none since the last report
}

func (u *usage) add(o usage) {
	u.admitted += o.admitted
	u.shed += o.shed
	u.fellBack += o.fellBack
	u.succeeded += o.succeeded
	u.failed += o.failed
	u.retries += o.retries
	u.parkChecks += o.parkChecks
	u.parkedNew += o.parkedNew
	u.released += o.released
	u.batchFirst += o.batchFirst
	u.firstInputTokens += o.firstInputTokens
	u.retryInputTokens += o.retryInputTokens
	u.inputTokensUsed += o.inputTokensUsed
	u.inputTokensEstimatedForUsed += o.inputTokensEstimatedForUsed
	u.outputTokensUsed += o.outputTokensUsed
	u.outputTokensUsedCalls += o.outputTokensUsedCalls
	if u.rateLimits == nil {
		u.rateLimits = o.rateLimits
	}
}

// gateEntry is one target's row.
type gateEntry struct {
	a          *assignment // nil: none (yet, or abandoned)
	receivedAt time.Time
	permits    uint32
	// grants are the pace's grants not yet used, and grantCount the last
	// running count an assignment carried, when grantSeen.
	grants, grantCount uint64
	grantSeen          bool

	tokens   float64
	tokensAt time.Time

	u          usage
	inFlight   uint64    // attempts and response bodies in flight now (a gauge)
	parked     uint64    // calls parked now (a gauge)
	pending    bool      // report it at the next tick
	urgent     bool      // report it now: its first report, or a probe's success
	subscribed bool      // reported on the current stream, or assigned: report again after a reconnect
	usedAt     time.Time // its first use, or its last report: what the next report's elapsed counts from
	rejected   bool      // policyd refused a report of it: never report it again

	// wake is closed at the target's next assignment (or abandon): parked
	// calls check again then.
	wake chan struct{}

	// The target's first call waits (a little) for its first assignment:
	// answered is closed when it arrives, or when the stream goes down.
	answered    chan struct{}
	answerUntil time.Time // on the system clock
}

// unpark counts a parked call leaving the park.
func (e *gateEntry) unpark() {
	if e.parked > 0 {
		e.parked--
	}
	e.pending = !e.rejected
}

// wakeParked wakes the calls parked on e.
func (e *gateEntry) wakeParked() {
	if e.wake != nil {
		close(e.wake)
		e.wake = nil
	}
}

// parkWake returns the channel closed at t's next assignment (nil: the
// target has no row, or the gate is off).
func (g *gate) parkWake(t target) <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	e, ok := g.entries[t]
	if !ok || g.off {
		return nil
	}
	if e.wake == nil {
		e.wake = make(chan struct{})
	}
	return e.wake
}

// answer releases the calls waiting for e's first assignment.
func (e *gateEntry) answer() {
	if e.answered != nil {
		close(e.answered)
		e.answered = nil
	}
}

func (e *gateEntry) refill(now time.Time) {
	if !e.tokensAt.IsZero() {
		if dt := now.Sub(e.tokensAt); dt > 0 {
			e.tokens = min(ownMaxTokens, e.tokens+ownRefill*dt.Seconds())
		}
	}
	if now.After(e.tokensAt) {
		e.tokensAt = now
	}
}

// gateAction is what the gate does with a first attempt.
type gateAction uint8

const (
	gateAdmit gateAction = iota
	gateWait
	gateFallBack
	gateStop
	// gatePark: hold the call in the client (no attempt, no RPC) and
	// resume it at each assignment for the target and every parkRecheck,
	// until it is admitted or stopped.
	gatePark
)

// Parking (docs/clients.md, "Parking").
const (
	// DefaultParkLimit is the longest a call without a deadline parks: two
	// of the breaker's longest open periods (60 s), so that a call outlives
	// an open period that doubled once, and a caller that gave no deadline
	// still gets an answer within two minutes. WithParkLimit changes it.
	DefaultParkLimit = 2 * time.Minute
	// parkRecheck is how often a parked call is checked again when no
	// assignment arrives, and how often a call parked by a pace draws again.
	parkRecheck = time.Second
)

// gateCall is what the gate knows of a first attempt's call.
type gateCall struct {
	canFallBack bool
	batch       bool   // the batch class: it draws against the batch share
	inputTokens uint64 // counted at the call's first check
}

// parkedCall is a call the gate holds.
type parkedCall struct {
	at, until time.Time // when it parked; when it must have an answer by
	call      gateCall
	retry     bool      // a retry, not a first attempt: not counted as one
	drawAt    time.Time // when a pace's draw is due again
}

// noDraw draws 1: only a full share admits.
type noDraw struct{}

func (noDraw) Float64() float64 { return 1 }

// gateVerdict is the gate's answer for one first attempt.
type gateVerdict struct {
	action     gateAction
	wait       time.Duration
	probe      bool
	stopReason StopReason
	reason     string // the assignment's reason, or the gate's own
	fallback   *gateFallback
	breaker    policydv1.BreakerState
	// What the assignment said when the attempt was not admitted:
	// admitFraction is the share the call drew against, the batch class's
	// when batchShare.
	admitFraction float64
	batchShare    bool
	// atLease: the process had inFlight requests in flight, its lease.
	atLease bool
	// ungranted: a pace with grants parked the call for want of one.
	ungranted          bool
	inFlight           uint64
	holdLeft, stopLeft time.Duration
	// parked is the call to resume (gatePark); waited how long the call was
	// parked before this verdict (resume).
	parked *parkedCall
	waited time.Duration
	// leftPark: the verdict ends a park (run.park).
	leftPark bool
	// assignmentReason is the assignment's reason (reason is the park
	// text while parked).
	assignmentReason string
}

// gate is the table. Its zero value is not usable: see newGate.
type gate struct {
	grace time.Duration

	mu      sync.Mutex
	entries map[target]*gateEntry
	off     bool // policyd has no Coordinate stream: the gate admits everything
	down    bool // the stream is down: a first call does not wait for an answer
}

func newGate(grace time.Duration) *gate {
	return &gate{grace: grace, entries: map[target]*gateEntry{}}
}

// firstAnswerWait bounds how long a target's first call waits for the
// target's first assignment (docs/clients.md, "Reports").
const firstAnswerWait = 100 * time.Millisecond

// awaitFirst returns, for a call on a target that has no assignment and
// has not been reported yet (its first call, or the first after an
// abandon) or whose first report is in flight, the channel closed when its
// first assignment arrives and the time (system clock) until which to
// wait; nil when the call should not wait: the target is assigned, the
// stream is down, or the wait is over.
func (g *gate) awaitFirst(now, sysNow time.Time, t target) (<-chan struct{}, time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.off || g.down {
		return nil, time.Time{}
	}
	e := g.entry(now, t)
	if e == nil || e.a != nil || e.rejected {
		return nil, time.Time{}
	}
	if e.answered == nil {
		if e.subscribed {
			return nil, time.Time{} // reported already: the answer is the stream's business
		}
		e.answered, e.answerUntil = make(chan struct{}), sysNow.Add(firstAnswerWait)
		e.pending, e.urgent = true, true
	}
	if !sysNow.Before(e.answerUntil) {
		return nil, time.Time{}
	}
	return e.answered, e.answerUntil
}

// setDown says whether the stream is down; going down releases the calls
// waiting for a first assignment.
func (g *gate) setDown(down bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.down = down
	if down {
		for _, e := range g.entries {
			e.answer()
		}
	}
}

// entry returns t's row, making it on first use (nil when the table is
// full). The caller holds g.mu.
func (g *gate) entry(now time.Time, t target) *gateEntry {
	if e, ok := g.entries[t]; ok {
		return e
	}
	if len(g.entries) >= maxGateTargets {
		return nil
	}
	e := &gateEntry{tokens: ownMaxTokens, usedAt: now}
	g.entries[t] = e
	return e
}

// check gates a first attempt of call to t: deadline is the time left
// before the caller's deadline (negative: none); draw is the uniform draw
// in [0, 1), taken only when the assignment sheds a fraction.
func (g *gate) check(now time.Time, t target, deadline time.Duration, call gateCall, draw Rand, parkLimit time.Duration) gateVerdict {
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.entry(now, t)
	if e == nil || g.off {
		return gateVerdict{}
	}
	v := g.decide(now, t, e, deadline, draw, false, call.batch, false)
	e.u.firstInputTokens += min(call.inputTokens, maxCallInputTokens)
	if call.batch {
		e.u.batchFirst++
	}
	e.pending = !e.rejected
	if v.action == gatePark {
		until, off := parkUntil(now, deadline, parkLimit)
		if call.canFallBack && e.a.fallback != nil || off || !until.After(now.Add(e.hintLeft(now))) {
			// Somewhere else to go, parking off, or no wait can fit: the
			// answer is now, as the cause says. A call that will not park
			// is never granted (grants go to parked calls): it draws
			// against the pace's share, as without grants.
			if v.ungranted {
				v = g.decide(now, t, e, deadline, draw, false, call.batch, true)
			}
			if v.action == gatePark {
				v = v.refusal()
			}
		} else {
			v.parked = &parkedCall{at: now, until: until, call: call, drawAt: now.Add(parkRecheck)}
			e.parked++
			e.u.parkChecks++
			e.u.parkedNew++
			return v
		}
	}
	return e.count(v, call)
}

// checkRetry gates a retry that NextDelay allowed, before it is sent
// (docs/clients.md, "Retries"): a stopped key stops it; an open breaker, or
// a probing one without a permit, parks it as a first attempt would be;
// otherwise it goes (a pace or a hold does not hold it: its delay already
// waited). Retries are not counted as first attempts.
func (g *gate) checkRetry(now time.Time, t target, deadline, parkLimit time.Duration) gateVerdict {
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.entry(now, t)
	if e == nil || g.off {
		return gateVerdict{}
	}
	v := g.decide(now, t, e, deadline, constDraw(0), true, false, false)
	switch v.action {
	case gatePark:
		if v.stopReason == StopFleetShed {
			return gateVerdict{}
		}
		until, off := parkUntil(now, deadline, parkLimit)
		if off || !until.After(now.Add(e.hintLeft(now))) {
			return v.refusal()
		}
		v.parked = &parkedCall{at: now, until: until, retry: true, drawAt: now.Add(parkRecheck)}
		e.parked++
		e.u.parkChecks++
		return v
	case gateWait:
		return gateVerdict{}
	}
	return v
}

// parkUntil is when a call parked at now must have its answer: its
// deadline (deadline ≥ 0: the time left), else parkLimit after now (0:
// DefaultParkLimit). off: parkLimit is negative, parking is off.
func parkUntil(now time.Time, deadline, parkLimit time.Duration) (until time.Time, off bool) {
	if parkLimit == 0 {
		parkLimit = DefaultParkLimit
	}
	until = now.Add(parkLimit)
	if deadline >= 0 {
		until = now.Add(deadline)
	}
	return until, parkLimit < 0
}

// constDraw always draws the same number.
type constDraw float64

func (d constDraw) Float64() float64 { return float64(d) }

// resume checks a parked call again: admitted (waited says how long it
// was parked), still parked, or stopped (DEADLINE) as soon as the time it
// has left is no longer than the fleet's estimate of the wait.
func (g *gate) resume(now time.Time, t target, p *parkedCall, draw Rand) gateVerdict {
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.entry(now, t)
	if e == nil || g.off {
		return gateVerdict{waited: now.Sub(p.at)}
	}
	if now.Before(p.drawAt) {
		draw = noDraw{} // a pace's draw is not due: only a full share admits
	} else {
		p.drawAt = now.Add(parkRecheck)
	}
	v := g.decide(now, t, e, -1, draw, true, p.call.batch, false)
	v.waited = now.Sub(p.at)
	e.pending = !e.rejected
	left := p.until.Sub(now)
	switch v.action {
	case gatePark:
		if left <= e.hintLeft(now) || left <= 0 {
			reason := ""
			if e.a != nil {
				reason = e.a.reason
			}
			v = gateVerdict{action: gateStop, stopReason: StopDeadline, waited: v.waited, breaker: v.breaker,
				admitFraction: v.admitFraction, holdLeft: v.holdLeft, stopLeft: v.stopLeft, assignmentReason: reason,
				reason: fmt.Sprintf("gave up waiting for the fleet after %v: %s", v.waited.Round(time.Second), reason)}
			return e.countParked(v, p)
		}
		v.parked = p
		e.u.parkChecks++
		return v
	case gateWait:
		if v.wait > left {
			v = gateVerdict{action: gateStop, stopReason: StopDeadline, waited: v.waited, reason: e.a.reason, breaker: e.a.breaker,
				admitFraction: e.a.admitFraction, holdLeft: v.wait, assignmentReason: e.a.reason}
		}
	}
	v = e.countParked(v, p)
	if !p.retry && (v.action == gateAdmit || v.action == gateWait) {
		e.u.released++
	}
	return v
}

// countParked counts a parked call's verdict: a first attempt's as count
// does; a retry's not at all (it goes after its wait, or stops).
func (e *gateEntry) countParked(v gateVerdict, p *parkedCall) gateVerdict {
	e.unpark()
	if p.retry {
		if v.action == gateWait {
			v.action, v.wait = gateAdmit, 0
		}
		return v
	}
	return e.count(v, p.call)
}

// cancelPark counts a parked call its caller cancelled.
func (g *gate) cancelPark(now time.Time, t target, p *parkedCall) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e := g.entry(now, t); e != nil {
		e.unpark()
		if !p.retry {
			e.countShed(p.call)
		}
	}
}

// count counts a verdict that is not gatePark, and turns a stop into the
// assignment's fallback when the caller can take it. The caller holds g.mu.
func (e *gateEntry) count(v gateVerdict, call gateCall) gateVerdict {
	if v.action == gateStop {
		e.countShed(call)
		if call.canFallBack && e.a != nil && e.a.fallback != nil {
			v.action, v.fallback = gateFallBack, e.a.fallback
			e.u.fellBack++
		}
	} else {
		e.u.admitted++
		if e.a != nil && e.a.hasPacePermits && e.grants > 0 {
			e.grants--
		}
	}
	return v
}

// countShed counts a first attempt not admitted. The caller holds g.mu.
func (e *gateEntry) countShed(gateCall) {
	e.u.shed++
}

// hintLeft is what is left of the assignment's park hint.
func (e *gateEntry) hintLeft(now time.Time) time.Duration {
	if e.a == nil {
		return 0
	}
	return max(0, e.a.parkHint-now.Sub(e.receivedAt))
}

// refusal is a park verdict answered at once: not admitted, for its cause.
func (v gateVerdict) refusal() gateVerdict {
	v.action, v.reason = gateStop, v.assignmentReason
	return v
}

// decide is the order of checks of docs/clients.md; a batch call draws
// against the batch class's share when the assignment names one; drawn: a
// pace with grants draws too (a call that will not park). The caller
// holds g.mu.
func (g *gate) decide(now time.Time, t target, e *gateEntry, deadline time.Duration, draw Rand, resumed, batch, drawn bool) gateVerdict {
	e.refill(now)
	a := e.a
	if a == nil {
		return gateVerdict{}
	}
	age := now.Sub(e.receivedAt)
	stop := func(r StopReason) gateVerdict {
		return gateVerdict{action: gateStop, stopReason: r, reason: a.reason, breaker: a.breaker, admitFraction: a.admitFraction,
			holdLeft: max(0, a.hold-age), stopLeft: max(0, a.stop-age), assignmentReason: a.reason}
	}
	park := func(r StopReason, cause string) gateVerdict {
		v := stop(r)
		v.action, v.reason = gatePark, parkText(cause, t, e.hintLeft(now))
		return v
	}
	if age >= a.ttl+g.grace {
		// policyd away never stops an agent: the process's own budget
		// limits its retries (allowRetry), never its first attempts; a
		// parked call goes (the daemon that would wake it is away).
		return gateVerdict{}
	}
	switch {
	case a.stop > age:
		return stop(StopFleetStop)
	case a.breaker == policydv1.BreakerState_BREAKER_STATE_OPEN:
		return park(StopCircuitOpen, "breaker open")
	case a.breaker == policydv1.BreakerState_BREAKER_STATE_HALF_OPEN:
		if e.permits > 0 {
			e.permits--
			return gateVerdict{probe: true}
		}
		// Without a permit, the fleet's probe rate as a share of first
		// attempts (the daemon sets it to about one a second in all); a
		// parked call probes only with a permit.
		if !resumed && draw.Float64() < a.admitFraction {
			return gateVerdict{probe: true}
		}
		return park(StopCircuitOpen, "breaker probing")
	case a.hasPacePermits && e.grants == 0 && !drawn:
		v := park(StopFleetShed, "paced")
		v.admitFraction, v.ungranted = a.admitFraction, true
		return v
	case (!a.hasPacePermits || drawn) && share(a, batch) < 1 && draw.Float64() >= share(a, batch):
		v := park(StopFleetShed, "paced")
		v.admitFraction, v.batchShare = share(a, batch), batch && a.hasBatchFraction
		return v
	case a.leased && e.inFlight >= uint64(a.inFlightLease):
		v := park(StopFleetShed, "at its lease of requests in flight")
		v.atLease, v.inFlight = true, e.inFlight
		return v
	case a.hold > age:
		left := a.hold - age
		if deadline >= 0 && left > deadline {
			return stop(StopDeadline)
		}
		return gateVerdict{action: gateWait, wait: left}
	}
	return gateVerdict{}
}

// share is the fraction of a's first attempts of the class to admit.
func share(a *assignment, batch bool) float64 {
	if batch && a.hasBatchFraction {
		return a.batchAdmitFraction
	}
	return a.admitFraction
}

// assign receives a for t (nil: abandon), timed from now.
func (g *gate) assign(now time.Time, t target, a *assignment) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.off {
		return
	}
	if a == nil {
		e, ok := g.entries[t]
		if !ok {
			return
		}
		e.answer()
		e.wakeParked()
		e.a, e.subscribed, e.grants = nil, false, 0
		if !e.pending && e.inFlight == 0 {
			// Forgotten, budget and all, once the budget has nothing to
			// remember; a call on the target starts it again.
			e.refill(now)
			if e.tokens >= ownMaxTokens {
				delete(g.entries, t)
			}
		}
		return
	}
	e := g.entry(now, t)
	if e == nil {
		return
	}
	e.a, e.receivedAt, e.permits, e.subscribed = a, now, a.probePermits, true
	e.takeGrants(a)
	e.answer()
	e.wakeParked()
}

// takeGrants adds the grants a's running count gives: its rise since the
// last count seen, or all of it when it went down (a new count: another
// replica's, or a restarted one's). The first count the entry sees grants
// nothing: it is what the daemon gave this client before (an entry made
// anew). A pace that ends drops the unused grants. The caller holds g.mu.
func (e *gateEntry) takeGrants(a *assignment) {
	if !a.hasPacePermits {
		e.grants = 0
		return
	}
	switch {
	case !e.grantSeen:
	case a.pacePermits >= e.grantCount:
		e.grants += a.pacePermits - e.grantCount
	default:
		e.grants += a.pacePermits
	}
	e.grantCount, e.grantSeen = a.pacePermits, true
}

// record counts an attempt's outcome in the process's own budget; a
// success also counts as succeeded. It reports whether to report now: a
// success while the breaker is half-open is a probe's answer, which the
// fleet waits for.
func (g *gate) record(now time.Time, t target, ok bool) (urgent bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.entry(now, t)
	if e == nil {
		return false
	}
	e.refill(now)
	if !ok {
		e.tokens = max(0, e.tokens-1)
		return false
	}
	e.tokens = min(ownMaxTokens, e.tokens+ownSuccessGain)
	e.u.succeeded++
	e.pending = !e.rejected
	if e.pending && e.a != nil && e.a.breaker == policydv1.BreakerState_BREAKER_STATE_HALF_OPEN {
		e.urgent = true
		return true
	}
	return false
}

// allowRetry says whether a retry decided without policyd (the fail-open
// policy) may be sent to t: the process's own budget has more than half
// its tokens, as gRPC A6's retry throttling.
func (g *gate) allowRetry(now time.Time, t target) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.entry(now, t)
	if e == nil || g.off {
		return true
	}
	e.refill(now)
	return e.tokens > ownThreshold
}

// countRetry counts a retry sent to t, of inputTokens.
func (g *gate) countRetry(now time.Time, t target, inputTokens uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e := g.entry(now, t); e != nil {
		e.u.retries++
		e.u.retryInputTokens += min(inputTokens, maxCallInputTokens)
		e.pending = !e.rejected
	}
}

// recordUsage counts what a succeeded call's response said it used
// (used input tokens), with the estimate its succeeding attempt was
// counted at, once per call: the daemon corrects the fleet's estimates by
// their ratio. It goes with the target's next report that counts an
// attempt; alone it is no activity.
func (g *gate) recordUsage(now time.Time, t target, used, estimated uint64) {
	if estimated == 0 {
		return // nothing to correct: the daemon compares the two
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if e := g.entry(now, t); e != nil && !g.off {
		e.u.inputTokensUsed += min(used, maxCallInputTokens)
		e.u.inputTokensEstimatedForUsed += min(estimated, maxCallInputTokens)
	}
}

// recordOutput counts the output tokens a succeeded call's response said
// it produced, once per call: the daemon counts each call against the
// provider's output-token limit at the fleet's average. It goes with the
// target's next report that counts an attempt; alone it is no activity.
func (g *gate) recordOutput(now time.Time, t target, output uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e := g.entry(now, t); e != nil && !g.off {
		e.u.outputTokensUsed += min(output, maxCallInputTokens)
		e.u.outputTokensUsedCalls++
	}
}

// flight counts a request to t going out (up) or done: the in_flight
// gauge of t's reports. A change is activity.
func (g *gate) flight(now time.Time, t target, up bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.entry(now, t)
	switch {
	case e == nil:
		return
	case up:
		e.inFlight++
	case e.inFlight > 0:
		e.inFlight--
		if e.a != nil && e.a.leased {
			e.wakeParked() // a call parked at the lease may go now
		}
	}
	e.pending = !e.rejected
}

// breakerCounts says whether a failure decided locally is reported: only
// the types the daemon's breakers count (docs/clients.md), so that a bad
// request or a bad key decided while policyd was away cannot open one.
func breakerCounts(t FailureType) bool {
	switch t {
	case FailureTypeOverloaded, FailureTypeServerError, FailureTypeTimeout, FailureTypeConnectionError:
		return true
	}
	return false
}

// countFailedLocally counts a failure the client decided itself.
func (g *gate) countFailedLocally(now time.Time, t target) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e := g.entry(now, t); e != nil {
		e.u.failed++
		e.pending = !e.rejected
	}
}

// observeRateLimits keeps h for t's next report.
func (g *gate) observeRateLimits(now time.Time, t target, h map[string]string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e := g.entry(now, t); e != nil {
		e.u.rateLimits = h
		e.pending = !e.rejected
	}
}

// report is one target's usage taken for a report.
type report struct {
	t        target
	u        usage
	inFlight uint64
	parked   uint64
	from     time.Time // the entry's usedAt when taken
}

// Which targets takeReports takes.
type reportKind uint8

const (
	reportActive      reportKind = iota // every target with activity since its last report
	reportResubscribe                   // and every subscribed one: a new stream knows nothing
	reportUrgent                        // only those to report now
)

// takeReports takes the usage of the targets kind names and marks them
// reported; giveBack returns what could not be sent.
func (g *gate) takeReports(kind reportKind) []report {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []report
	for t, e := range g.entries {
		switch {
		case e.rejected:
			continue
		case kind == reportUrgent && !(e.urgent && e.pending):
			continue
		case !e.pending && !(kind == reportResubscribe && e.subscribed):
			continue
		}
		u := e.u
		e.u, e.pending, e.urgent, e.subscribed = usage{}, false, false, true
		if u.admitted+u.retries == 0 {
			// policyd bounds the tokens used by the report's attempts: a
			// usage read after the report that counted its call (a
			// stream's, at its end) waits for the target's next attempt.
			e.u.inputTokensUsed, e.u.inputTokensEstimatedForUsed = u.inputTokensUsed, u.inputTokensEstimatedForUsed
			e.u.outputTokensUsed, e.u.outputTokensUsedCalls = u.outputTokensUsed, u.outputTokensUsedCalls
			u.inputTokensUsed, u.inputTokensEstimatedForUsed, u.outputTokensUsed, u.outputTokensUsedCalls = 0, 0, 0, 0
		}
		out = append(out, report{t: t, u: u, inFlight: e.inFlight, parked: e.parked, from: e.usedAt})
	}
	return out
}

// reported moves the reported targets' elapsed origin to at.
func (g *gate) reported(rs []report, at time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, r := range rs {
		if e, ok := g.entries[r.t]; ok && e.usedAt.Equal(r.from) {
			e.usedAt = at
		}
	}
}

// giveBack adds counts that could not be sent to the next report.
func (g *gate) giveBack(rs []report) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, r := range rs {
		e, ok := g.entries[r.t]
		if !ok {
			if len(g.entries) >= maxGateTargets {
				continue
			}
			e = &gateEntry{tokens: ownMaxTokens, usedAt: r.from}
			g.entries[r.t] = e
		}
		e.u.add(r.u)
		if !e.rejected {
			e.pending = true
		}
	}
}

// reject stops reporting t: policyd refused its report.
func (g *gate) reject(t target) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e, ok := g.entries[t]; ok {
		e.rejected, e.pending, e.subscribed, e.u = true, false, false, usage{}
	}
}

// turnOff makes the gate admit everything from now on: policyd runs
// without fleet memory, or without the Coordinate stream.
func (g *gate) turnOff() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.off = true
	for _, e := range g.entries {
		e.answer()
		e.wakeParked()
	}
	clear(g.entries)
}

// gateText says in a sentence why the gate did not admit a first attempt
// (docs/clients.md, "What the caller sees"; clients/testdata/gate.json pins
// it): what the fleet does, then the assignment's reason.
func gateText(t target, v gateVerdict) string {
	if v.waited > 0 && v.stopReason == StopDeadline && v.parked == nil && strings.HasPrefix(v.reason, "gave up waiting") {
		return v.reason // a parked call whose deadline can no longer be met
	}
	var s string
	switch v.stopReason {
	case StopFleetStop:
		s = fmt.Sprintf("the fleet stopped calls to %s for another %s", t, textSeconds(v.stopLeft))
	case StopCircuitOpen:
		if v.breaker == policydv1.BreakerState_BREAKER_STATE_HALF_OPEN {
			s = fmt.Sprintf("the fleet's circuit breaker for %s is half-open and this process has no probe permit left", t)
		} else {
			s = fmt.Sprintf("the fleet's circuit breaker for %s is open", t)
		}
	case StopFleetShed:
		if v.atLease {
			s = fmt.Sprintf("this process has %d requests in flight to %s, its lease of the fleet's cap", v.inFlight, t)
			break
		}
		class := ""
		if v.batchShare {
			class = "batch "
		}
		s = fmt.Sprintf("the fleet admits %d%% of %sfirst attempts to %s, not this one", int(math.Floor(v.admitFraction*100+0.5)), class, t)
	case StopDeadline:
		s = fmt.Sprintf("the fleet holds first attempts to %s for another %s, past the deadline", t, textSeconds(v.holdLeft))
	default:
		s = "the fleet did not admit a first attempt to " + t.String()
	}
	if v.reason != "" {
		s += ": " + v.reason
	}
	return s
}

// parkText is what the decision hook reports of a parked call: "waiting
// for the fleet: breaker open on openai/gpt-4o, ~4 s" (the hint's rest,
// left out when unknown).
func parkText(cause string, t target, hintLeft time.Duration) string {
	s := fmt.Sprintf("waiting for the fleet: %s on %s", cause, t)
	if hintLeft > 0 {
		s += fmt.Sprintf(", ~%d s", int(hintLeft.Round(time.Second)/time.Second))
	}
	return s
}

// budgetText is the stop text of a retry the process's own budget refused.
func budgetText(t target) string {
	return "policyd is unreachable and this process's own retry budget for " + t.String() + " is spent"
}

// textSeconds renders d as the texts do: seconds with one decimal.
func textSeconds(d time.Duration) string { return fmt.Sprintf("%.1f s", max(0, d).Seconds()) }
