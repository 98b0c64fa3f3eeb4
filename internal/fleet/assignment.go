package fleet

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// What the Coordinate streams bring and take: reports of each client's counts,
// and assignments of each bucket's state to the clients' gates.

// Usage is one client's counts on one target over one interval.
type Usage struct {
	Target
	ClientID string
	// Origin is the stream's caller: its identity and connection.
	Origin Origin
	// Elapsed is the interval the counts cover (0: within the last second).
	// Counts over a longer interval than the breaker's window enter the
	// window in proportion: a client's buffered counts of ten minutes are
	// not ten minutes' worth of calls in the last second.
	Elapsed time.Duration
	// First attempts admitted and shed by the client's gate, successes,
	// failures decided without NextDelay, retries sent.
	Admitted, Shed, Succeeded, Failed, Retries int64
	// FellBack is, of Shed, the first attempts the gate sent to the
	// assignment's fallback.
	FellBack int64
	// RequestsPerMinute is the provider's request limit from the last
	// success's rate-limit headers (0: none reported), and RemainingShare
	// the share of it they say is left (RemainingShare; -1 or 0 with no
	// limit: not said).
	RequestsPerMinute int64
	RemainingShare    float64
	// InputTokensPerMinute is the provider's input-token limit from the
	// same headers (0: none); FirstAttemptTokens and RetryTokens the input
	// tokens the client estimated for its first attempts and retries.
	InputTokensPerMinute, FirstAttemptTokens, RetryTokens int64
	// InputTokensUsed is what the responses said the calls used, where the
	// client read their usage, and InputTokensEstimated the client's
	// estimates of those same calls: their ratio corrects the estimates.
	InputTokensUsed, InputTokensEstimated int64
	// OutputTokensPerMinute is the provider's output-token limit from the
	// same headers (0: none); OutputTokensUsed the output tokens the
	// responses said the calls produced, where the client read their usage,
	// and OutputCalls how many calls those were.
	OutputTokensPerMinute, OutputTokensUsed, OutputCalls int64
	// Left is what the same headers said is left of the request,
	// input-token and output-token limits (Left), shown by GetBucket and
	// the pace's reason.
	Left [limitKinds]LimitLeft
	// BatchFirst: the first attempts of the batch class among Admitted and
	// Shed.
	BatchFirst int64
	// InFlight is how many requests the client has in flight on the
	// target now (a gauge).
	InFlight int64
	// Parked is how many calls the client's gate holds parked now;
	// ParkedNew the calls it parked at their first check, and Released
	// the parked calls it admitted (counted in Admitted too).
	Parked, ParkedNew, Released int64
}

// Assignment is a target's state for one client's gate, durations from now.
type Assignment struct {
	Breaker       BreakerState
	Hold, Stop    time.Duration
	AdmitFraction float64
	// BatchAdmitFraction is the batch class's share when Classes: the
	// bucket is paced or slow-starting and streams report batch calls, and
	// batch yields first (classes.go); AdmitFraction is then the
	// interactive class's.
	BatchAdmitFraction float64
	Classes            bool
	// InFlightLease is the most requests this client may have in flight
	// on the target when Leased: its lease of the target's cap
	// (Config.MaxInFlight; leases.go). 0 leased: none now.
	InFlightLease uint32
	Leased        bool
	// PacePermits is the running count of first attempts the pace granted
	// this client when Permits: the gate admits a first attempt only
	// against a grant it has not used (grants.go). Without Permits, a pace
	// admits AdmitFraction of the first attempts by draws.
	PacePermits  uint64
	Permits      bool
	ProbePermits uint32
	Reason       string
	TTL          time.Duration
	// Cause names what keeps the gate from admitting everything, for the
	// fallback's kind.
	Cause Cause
	// ParkHint is the daemon's estimate of how long a parked call waits
	// (0: unknown or none): a gate does not park a call whose deadline
	// comes first.
	ParkHint time.Duration
}

// Cause is what keeps a gate from admitting every first attempt.
type Cause uint8

const (
	// CauseNone: nothing; the gate admits everything.
	CauseNone Cause = iota
	// CauseStop: the key is stopped.
	CauseStop
	// CauseBreaker: the model's breaker is open or probing.
	CauseBreaker
	// CauseHold: a shared cooldown is in force.
	CauseHold
	// CausePacing: the admitted share is paced below the demand.
	CausePacing
)

// Admits says whether the assignment lets every first attempt through now.
func (a Assignment) Admits() bool { return a.Cause == CauseNone }

// Masked is a as a gate under switches sw sees it: what a profile turns off
// (a stop, the breaker, a hold) neither shows nor gates, and the cause
// falls back to pacing (or none) when it was one of those.
func (a Assignment) Masked(sw Switches) Assignment {
	if !sw.Stop {
		a.Stop = 0
	}
	if !sw.Breaker {
		a.Breaker, a.ProbePermits = Closed, 0
	}
	if !sw.Hold {
		a.Hold = 0
	}
	if a.Cause == CauseStop && !sw.Stop || a.Cause == CauseBreaker && !sw.Breaker || a.Cause == CauseHold && !sw.Hold {
		a.Cause = CauseNone
		if a.AdmitFraction < 1 {
			a.Cause = CausePacing
		}
	}
	return a
}

// maxHoldSlots bounds a bucket's memory of which client has which slot.
const maxHoldSlots = 10_000

// Report records u. It creates the availability bucket of u's target (the
// breaker counts its outcomes and the budget its first attempts) and its
// rate-limit bucket (pacing divides the provider's limit by its demand).
func (f *Fleet) Report(u Usage) {
	if u.Provider == "" {
		return
	}
	now, c := f.clock(), f.cfg.Load()
	sc := c.Scopes
	keys := [3]Key{sc.key(ScopeAvailability, u.Target), sc.key(ScopeRateLimit, u.Target), {}}
	var events []Event
	emit := func(e Event) { events = append(events, e) }
	raw := u // the totals count every call
	if u.Elapsed > c.Breaker.Window {
		u.Admitted, u.Shed, u.Succeeded, u.Failed, u.Retries = inWindow(u.Admitted, u.Elapsed, c), inWindow(u.Shed, u.Elapsed, c),
			inWindow(u.Succeeded, u.Elapsed, c), inWindow(u.Failed, u.Elapsed, c), inWindow(u.Retries, u.Elapsed, c)
		u.FirstAttemptTokens, u.RetryTokens = inWindow(u.FirstAttemptTokens, u.Elapsed, c), inWindow(u.RetryTokens, u.Elapsed, c)
		u.InputTokensUsed, u.InputTokensEstimated = inWindow(u.InputTokensUsed, u.Elapsed, c), inWindow(u.InputTokensEstimated, u.Elapsed, c)
	}
	f.store.lock()
	bs := f.store.getThree(keys, [3]bool{true, true, false}, now)
	events = append(events, f.store.takeLimits()...)
	for _, b := range bs[:2] {
		if b == nil {
			continue
		}
		b.ensureRings(&c.Breaker)
		b.reportedAt = now
		b.totals.reports++
		b.totals.admitted += raw.Admitted
		b.totals.shed += raw.Shed
		b.totals.successes += raw.Succeeded
		if b.streamClients == nil {
			b.streamClients = make(map[string]int64)
		}
		if _, ok := b.streamClients[u.ClientID]; ok || len(b.streamClients) < maxHoldSlots {
			b.streamClients[u.ClientID] = now.UnixNano()
		}
		// The calls that arrived: a released call arrived when it parked.
		b.firstAttempts.add(now, int(u.Admitted-u.Released+u.Shed+u.ParkedNew))
		b.addBatch(now, &c.Breaker, u.BatchFirst)
		b.reportParked(u.ClientID, u.Parked)
		b.reportInFlight(u.ClientID, u.InFlight)
		b.retries.add(now, int(u.Retries))
		b.admitted.add(now, int(u.Admitted))
		b.noteShed(now, raw, emit)
	}
	if av := bs[0]; av != nil {
		av.advance(now, c, emit) // a success after the open period ended is a probe's
		av.successes.add(now, int(u.Succeeded))
		if av.state == HalfOpen {
			av.probeOK += int(u.Succeeded)
		}
		if u.Failed > 0 {
			av.lastFailure = now
			av.lastCounted = now
			av.addFailures(now, u.Origin.clientKey(u.ClientID), int(u.Failed), &c.Breaker)
		}
		av.advance(now, c, emit)
		if u.Failed > 0 && av.state == HalfOpen {
			av.open(now, av.reopenPeriod(now, &c.Breaker), u.ClientID, "failures reported while half-open", emit)
		}
		av.maybeOpen(now, u.ClientID, "reported failures", &c.Breaker, emit)
	}
	if rl := bs[1]; rl != nil {
		rl.noteGrantUse(u.ClientID, u.Admitted, u.Parked, now) // a pace's grants are the rate-limit bucket's
		rl.addTokens(now, &c.Breaker, u.FirstAttemptTokens, u.RetryTokens)
		rl.addUsage(now, &c.Breaker, u.InputTokensUsed, u.InputTokensEstimated)
		rl.addOutput(now, &c.Breaker, u.OutputTokensUsed, u.OutputCalls)
		rl.learnLimit(now, c, requestLimit, u.RequestsPerMinute, u.ClientID, false)
		rl.learnLimit(now, c, tokenLimit, u.InputTokensPerMinute, u.ClientID, false)
		rl.learnLimit(now, c, outputLimit, u.OutputTokensPerMinute, u.ClientID, false)
		rl.noteHeaderless(now, u.Succeeded, [limitKinds]int64{requestLimit: u.RequestsPerMinute, tokenLimit: u.InputTokensPerMinute, outputLimit: u.OutputTokensPerMinute})
		rl.followRemaining(now, c, u.RemainingShare)
		rl.noteLeft(now, u.Left)
	}
	for _, b := range bs[:2] {
		if b != nil {
			b.publishPace(emit)
		}
	}
	f.store.unlock()
	stamp(events, u.Origin)
	f.publish(events, u.Tenant)
}

// inWindow is the part of n counts over elapsed that falls in the
// breaker's window (rounded up: a single failure still counts).
func inWindow(n int64, elapsed time.Duration, c *Config) int64 {
	return int64(math.Ceil(float64(n) * c.Breaker.Window.Seconds() / elapsed.Seconds()))
}

// Assign is target t's assignment for client's gate now. While the breaker
// is half-open, it may carry one of the fleet's probe permits.
func (f *Fleet) Assign(t Target, client string) Assignment {
	now, c := f.clock(), f.cfg.Load()
	a := Assignment{AdmitFraction: 1, TTL: c.Stream.TTL}
	if t.Provider == "" {
		return a
	}
	sc := c.Scopes
	keys := [3]Key{sc.key(ScopeRateLimit, t), sc.key(ScopeAvailability, t), sc.key(ScopeAuth, t)}
	var events []Event
	emit := func(e Event) { events = append(events, e) }
	f.store.lock()
	bs := f.store.getThree(keys, [3]bool{}, now)
	rl, av, au := bs[0], bs[1], bs[2]
	var why []string
	for _, b := range []*Bucket{au, rl} {
		if b != nil && now.Before(b.stopUntil) && b.stopUntil.Sub(now) > a.Stop {
			a.Stop = b.stopUntil.Sub(now)
			a.Cause = CauseStop
			why = append(why, "stopped: "+b.stopWhy)
		}
	}
	if av != nil {
		av.advance(now, c, emit)
		a.Breaker = av.state
		switch av.state {
		case Open:
			why = append(why, fmt.Sprintf("breaker open for %v more: %s", av.openUntil.Sub(now).Round(100*time.Millisecond), av.openWhy))
		case HalfOpen:
			why = append(why, "breaker half-open: probing")
		}
		if av.state != Closed && a.Cause == CauseNone {
			a.Cause = CauseBreaker
		}
		a.ParkHint = av.parkHint(now, &c.Breaker)
		if f.probePermit(av, client, now, &c.Breaker) {
			a.ProbePermits = 1
			why = append(why, "a probe permit for a parked call")
		}
	}
	for _, b := range []*Bucket{av, rl} {
		if b == nil {
			continue
		}
		b.expireLimits(now, c) // a limit that expired starts its release
		if h := f.releaseHold(b, client, now); h > a.Hold {
			a.Hold = h
			why = append(why, b.releaseWhy(h))
		}
	}
	for _, b := range []*Bucket{rl, av} {
		if b == nil || !now.Before(b.holdUntil) {
			continue
		}
		i, ok := b.holdSlots[client]
		if !ok {
			i = b.waiters
			b.waiters++
			if b.holdSlots == nil {
				b.holdSlots = make(map[string]int)
			}
			if len(b.holdSlots) < maxHoldSlots {
				b.holdSlots[client] = i
			}
		}
		if h := b.holdUntil.Sub(now) + f.slot(i, b.releaseWindow(&c.Hold)); h > a.Hold {
			a.Hold = h
		}
	}
	if a.Hold > 0 {
		why = append(why, fmt.Sprintf("shared cooldown: first attempts wait %v (this client's slot included)", a.Hold.Round(100*time.Millisecond)))
		if a.Cause == CauseNone {
			a.Cause = CauseHold
		}
	}
	if av != nil && av.state == HalfOpen {
		a.AdmitFraction = av.probeFraction(now, c)
		why = append(why, fmt.Sprintf("%.1f %% of first attempts go as probes", 100*a.AdmitFraction))
	}
	var paced *Bucket
	for _, b := range []*Bucket{av, rl} {
		if b == nil || (av != nil && av.state == HalfOpen) {
			continue
		}
		if fr, w, byPace := b.admitFraction(now, c); fr < a.AdmitFraction {
			a.AdmitFraction, paced = fr, b
			if !byPace {
				paced = nil // a slow start's share is drawn
			}
			why = append(why, w)
			if a.Cause == CauseNone {
				a.Cause = CausePacing
			}
		}
	}
	if limit := c.inFlightCap(t); limit > 0 && rl != nil {
		a.InFlightLease, a.Leased = f.lease(rl, c, client, limit, now), true
		why = append(why, fmt.Sprintf("a lease of %d of the %d requests in flight the target allows", a.InFlightLease, limit))
	}
	if paced != nil {
		if fi, fb, ok := paced.splitByClass(now, c, a.AdmitFraction); ok {
			a.AdmitFraction, a.BatchAdmitFraction, a.Classes = fi, fb, true
			why = append(why, fmt.Sprintf("batch yields first: interactive %.0f %%, batch %.0f %%", 100*fi, 100*fb))
		} else {
			// Whatever else holds the gate (a hold's wait comes after a
			// grant): without grants, the draws would release the parked.
			paced.grant(now, paced.grantRate(now, c, a.AdmitFraction))
			a.PacePermits, a.Permits = paced.grantsTo(client), true
		}
	}

	for _, b := range []*Bucket{av, rl} {
		if b != nil {
			b.publishPace(emit)
		}
	}
	f.store.unlock()
	a.Reason = strings.Join(why, "; ")
	f.publish(events, t.Tenant)
	return a
}

// probeFraction is the share of first attempts a half-open breaker lets
// through as probes: about one per ProbeInterval for the whole fleet, given
// the first attempts the streams reported (all of them while none did).
// A share, not permits handed to chosen clients: a permit waits for its
// holder's next call, which may be many seconds away or never come.
func (b *Bucket) probeFraction(now time.Time, c *Config) float64 {
	if b.firstAttempts.secs == nil {
		return 1
	}
	first := int64(b.firstAttempts.sum(now)) + b.others(now).firstAttempts
	perInterval := float64(first) / c.Breaker.Window.Seconds() * c.Breaker.ProbeInterval.Seconds()
	if perInterval <= 1 {
		return 1
	}
	return 1 / perInterval
}

// CountAssignments adds n assignments sent for t's availability bucket (for
// FleetService), when the fleet has it.
func (f *Fleet) CountAssignments(t Target, n int64) {
	k := f.cfg.Load().Scopes.key(ScopeAvailability, t)
	f.store.lock()
	if b := f.store.get(k, false, time.Time{}); b != nil {
		b.totals.assignments += n
	}
	f.store.unlock()
}

// Differs says whether a, computed at now, tells a gate something other
// than prev, sent at prevAt: another breaker state or probe permit, a new
// hold or stop (not the same one counting down), or an admit fraction 5
// points away (or back to all). The streams send only assignments that
// differ, and refreshes.
func (a Assignment) Differs(prev Assignment, prevAt, now time.Time) bool {
	const slack = 100 * time.Millisecond
	ends := func(d, pd time.Duration) bool {
		pend := prevAt.Add(pd)
		if d <= 0 {
			return now.Before(pend.Add(-slack)) // the gate thinks one is still on
		}
		end := now.Add(d)
		return end.Sub(pend) > slack || pend.Sub(end) > slack
	}
	return a.Breaker != prev.Breaker || a.ProbePermits != prev.ProbePermits || ends(a.Hold, prev.Hold) || ends(a.Stop, prev.Stop) ||
		math.Abs(a.AdmitFraction-prev.AdmitFraction) >= 0.05 || (a.AdmitFraction == 1) != (prev.AdmitFraction == 1) ||
		a.Classes != prev.Classes || math.Abs(a.BatchAdmitFraction-prev.BatchAdmitFraction) >= 0.05 ||
		a.Leased != prev.Leased || a.InFlightLease != prev.InFlightLease ||
		a.Permits != prev.Permits || a.PacePermits != prev.PacePermits
}
