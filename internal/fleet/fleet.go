package fleet

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

// incidentGap: a failure after this long without one on its bucket starts
// a new incident (the journal's first-failures view cuts at the same gap).
const incidentGap = time.Minute

// Fleet decides with every agent's failures in mind.
type Fleet struct {
	cfg   atomic.Pointer[Config]
	store *buckets
	clock func() time.Time
	sink  Sink

	lastSweep atomic.Int64 // unix nanoseconds
	lastTick  atomic.Int64
	effects   [effectCount]atomic.Int64

	streams atomic.Int64 // Coordinate streams connected

	changes broadcast // at each transition (NextTransition)
	ticks   broadcast // at each of Run's ticks (NextTick)

	shared *shared // nil: one replica (replica.go)
	// slotStride and slotOffset interleave the replicas' release slots
	// (replica.go): the i-th waiter here takes slot i×stride+offset.
	slotStride, slotOffset atomic.Int32
}

// Option configures a Fleet.
type Option func(*Fleet)

// WithClock sets the clock (default time.Now).
func WithClock(now func() time.Time) Option { return func(f *Fleet) { f.clock = now } }

// WithSink sends every transition to s.
func WithSink(s Sink) Option { return func(f *Fleet) { f.sink = s } }

// New returns a fleet with cfg, which must be valid (Config.Validate).
func New(cfg Config, opts ...Option) *Fleet {
	f := &Fleet{clock: time.Now}
	f.cfg.Store(&cfg)
	for _, o := range opts {
		o(f)
	}
	f.store = newBuckets(cfg.MaxBuckets)
	return f
}

// Config is the fleet's configuration.
func (f *Fleet) Config() Config { return *f.cfg.Load() }

// SetConfig makes cfg (valid, see Config.Validate) apply to decisions from
// now on, keeping every bucket's state: a policy reload does not forget an
// open breaker. A lower MaxBuckets forgets nothing: it stops new buckets.
func (f *Fleet) SetConfig(cfg Config) {
	f.cfg.Store(&cfg)
	f.store.setMax(cfg.MaxBuckets)
}

// Reason is why the fleet stops a retry.
type Reason uint8

const (
	ReasonNone Reason = iota
	// ReasonCircuitOpen: the bucket's breaker is open (or probing).
	ReasonCircuitOpen
	// ReasonBudget: the bucket's retry budget is spent.
	ReasonBudget
	// ReasonStop: another agent's failure stopped the key.
	ReasonStop
	// ReasonDeadline: the wait the fleet asks for does not fit.
	ReasonDeadline
	// ReasonAboveCeiling: a shared cooldown (another agent's server delay
	// hint) is longer than the caller's hint ceiling, which stops (or falls
	// back) as the hint itself would have.
	ReasonAboveCeiling
)

// Ask is one failed attempt and what the caller's strategy answered.
type Ask struct {
	Target
	ClientID    string
	FailureType policydv1.FailureType
	Attempt     int
	// RetryAfter is the server's delay hint (0: none).
	RetryAfter time.Duration
	// HoldCeiling is the longest the caller's own profile would wait on a
	// hint (0: no limit): the fleet never holds others longer on its word.
	HoldCeiling time.Duration
	// Origin is who asks (identity and address): distinct clients are
	// counted by it, and events record it.
	Origin Origin
	// RequestsPerMinute is the provider's request limit from the failure's
	// rate-limit headers (0: none), for pacing.
	RequestsPerMinute int64
	// InputTokensPerMinute is the provider's input-token limit from the
	// same headers (0: none), for pacing.
	InputTokensPerMinute int64
	// OutputTokensPerMinute is the provider's output-token limit from the
	// same headers (0: none), for pacing.
	OutputTokensPerMinute int64
	// Left is what they said is left of those limits.
	Left [limitKinds]LimitLeft
	// Recovery is the failure's recovery action, quoted by a fleet stop.
	Recovery string
	// Retry and Delay: the strategy's answer; the fleet acts only on retries.
	Retry bool
	Delay time.Duration
	// CanFallBack: the caller has somewhere to go, which the fleet prefers to
	// a long wait.
	CanFallBack bool
	// MaxWait is the longest wait within the deadline, the time budget and
	// the profile's ceiling: 0 for no limit, negative when no wait fits.
	MaxWait time.Duration
	// HintCeiling is the longest server delay hint the caller's strategy
	// waits for (0: none), and AboveCeiling what it does with a longer one.
	// A shared cooldown is another agent's hint: it meets the same ceiling,
	// so that every agent of a bucket gets the same answer.
	HintCeiling  time.Duration
	AboveCeiling CeilingAction
	Switches     Switches
}

// CeilingAction is what a strategy does with a server delay hint above its
// ceiling (strategy.AboveCeiling, as the fleet needs it).
type CeilingAction uint8

const (
	// CeilingStop stops, or falls back when the caller can.
	CeilingStop CeilingAction = iota
	// CeilingIgnore does not trust the hint: the cooldown is not waited.
	CeilingIgnore
	// CeilingClamp waits the ceiling.
	CeilingClamp
)

// Answer is the fleet's word on an Ask.
type Answer struct {
	// Retry after Delay, else stop (or fall back) for Reason.
	Retry  bool
	Delay  time.Duration
	Reason Reason
	Why    string
	// State is what the fleet knows of the failure's bucket, nil when it
	// has nothing to say.
	State *State
}

// State is a bucket's state as a decision shows it.
type State struct {
	Bucket          string
	Breaker         BreakerState
	HoldLeft        time.Duration
	OpenLeft        time.Duration
	Tokens          float64
	BudgetExhausted bool
	Stopped         bool
	Changed         bool
	Reason          string
}

type effect uint8

// The effects decisions count (Effects).
const (
	effectHold effect = iota
	effectStop
	effectCircuit
	effectProbe
	effectBudget
	effectPaced
	effectDeadline
	effectCount
)

var effectNames = [effectCount]string{"hold", "stop", "circuit", "probe", "budget", "paced", "deadline"}

// Effects counts, per effect name, the decisions the fleet changed.
func (f *Fleet) Effects() map[string]int64 {
	m := make(map[string]int64, effectCount)
	for i := range effectCount {
		m[effectNames[i]] = f.effects[i].Load()
	}
	return m
}

// Decide records the failure and returns the fleet's answer. The strategy's
// answer stands unless the fleet knows better: a stopped key stops, an open
// breaker falls back or waits out the open period, a hold lengthens the
// wait to its release slot, and every retry draws from the budget.
func (f *Fleet) Decide(a Ask) Answer {
	now := f.clock()
	if a.Provider == "" {
		// No provider, no failure domain to share.
		return Answer{Retry: a.Retry, Delay: a.Delay}
	}
	cfg := f.cfg.Load()
	d := decision{f: f, c: cfg, a: &a, now: now}
	d.scope, d.tracked = ScopeOf(a.FailureType)
	sc := cfg.Scopes
	keys := [3]Key{sc.key(ScopeRateLimit, a.Target), sc.key(ScopeAvailability, a.Target), sc.key(ScopeAuth, a.Target)}
	create := [3]bool{d.tracked && d.scope == ScopeRateLimit, d.tracked && d.scope == ScopeAvailability,
		d.tracked && d.scope == ScopeAuth && a.KeyID != ""}
	f.store.lock()
	bs := f.store.getThree(keys, create, now)
	d.events = f.store.takeLimits()
	d.rl, d.av, d.au = bs[0], bs[1], bs[2]
	ans := d.run()
	f.store.unlock()
	stamp(d.events, a.Origin)
	f.publish(d.events, a.Tenant)
	f.maybeSweep(cfg, now)
	return ans
}

// decision is one Decide under the buckets' lock: the failure, its three
// buckets (rate limit, availability, auth; nil where the fleet has none)
// and the answer as the steps build it.
type decision struct {
	f       *Fleet
	c       *Config
	a       *Ask
	now     time.Time
	scope   Scope
	tracked bool

	rl, av, au *Bucket
	own        *Bucket // the failure's own bucket (nil: not tracked)

	delay  time.Duration // the wait so far (the strategy's, then longer)
	probe  bool          // the retry goes as the half-open breaker's probe
	parks  bool          // the client's gate parks the retry behind the breaker
	show   *Bucket       // the bucket the answer's State shows
	events []Event
}

func (d *decision) emit(e Event) { d.events = append(d.events, e) }

// run records the failure, then decides a retry in four steps, each of
// which may stop it or lengthen its wait: 1. a stopped key, 2. the breaker,
// 3. the shared cooldowns, 4. the retry budget.
func (d *decision) run() Answer {
	if d.av != nil {
		d.av.advance(d.now, d.c, d.emit)
	}
	if d.tracked {
		d.own = [...]*Bucket{nil, d.rl, d.av, d.au}[d.scope]
	}
	d.record()
	if d.rl != nil {
		d.rl.publishPace(d.emit)
	}
	d.show = d.own
	if !d.a.Retry {
		return Answer{Delay: d.a.Delay, State: d.f.stateIfActive(d.c, d.own, d.now, false)}
	}
	d.delay = d.a.Delay
	for _, step := range [...]func() (Answer, bool){d.stopStep, d.breakerStep, d.holdStep, d.budgetStep} {
		if ans, stop := step(); stop {
			return ans
		}
	}
	ans := Answer{Retry: true, Delay: d.delay}
	ans.State = d.f.stateIfActive(d.c, d.show, d.now, d.delay != d.a.Delay)
	if ans.State == nil && d.av != nil && d.av != d.show {
		ans.State = d.f.stateIfActive(d.c, d.av, d.now, false)
	}
	return ans
}

// record takes what the failure says: a request limit, a 429 for pacing,
// a hold from its delay hint, a stop of its key, a failure for the breaker.
func (d *decision) record() {
	a, c, now, sw := d.a, d.c, d.now, d.a.Switches
	if d.rl != nil {
		on429 := a.FailureType == policydv1.FailureType_FAILURE_TYPE_RATE_LIMIT
		wasPacing := d.rl.pacing()
		d.rl.learnLimit(now, c, requestLimit, a.RequestsPerMinute, a.ClientID, on429)
		d.rl.learnLimit(now, c, tokenLimit, a.InputTokensPerMinute, a.ClientID, on429)
		d.rl.learnLimit(now, c, outputLimit, a.OutputTokensPerMinute, a.ClientID, on429)
		if on429 && !wasPacing && d.rl.pacing() && (a.InputTokensPerMinute > 0 || a.OutputTokensPerMinute > 0) {
			d.rl.startCut()
		}
		d.rl.noteLeft(now, a.Left)
	}
	if d.rl != nil && a.FailureType == policydv1.FailureType_FAILURE_TYPE_RATE_LIMIT {
		d.rl.throttled(now, c, a.ClientID)
	}
	own := d.own
	if own == nil {
		return
	}
	if own.lastFailure.IsZero() || now.Sub(own.lastFailure) >= incidentGap {
		own.firstClient = a.ClientID // the first failure of a new run of them
	}
	own.lastFailure = now
	if sw.Hold && a.RetryAfter > 0 {
		own.setHold(now, d.hint(), a.RetryAfter, a.ClientID, a.Origin, d.emit)
	}
	if sw.Stop && stopsKey(a.FailureType) && a.KeyID != "" {
		if !now.Before(own.stopUntil) {
			own.stopWhy = fmt.Sprintf("%s on key %q: %s", typeName(a.FailureType), a.KeyID, strings.TrimSpace(a.Recovery))
			d.emit(Event{At: now, Key: own.key, Kind: EventFleetStop, ClientID: a.ClientID, Reason: own.stopWhy,
				Counts: map[string]int64{"stop_ms": c.Stop.For.Milliseconds()}})
		}
		own.stopUntil = now.Add(c.Stop.For)
		own.raisedStop = true
	}
	if sw.Breaker && own == d.av && countedForBreaker(a.FailureType) {
		d.av.countFailure(now, a.ClientID, a.Origin.clientKey(a.ClientID), a.FailureType, &c.Breaker, d.emit)
	}
}

// hint is the hold the failure's delay hint sets: the hint, cut to the
// fleet's ceiling and to what the caller's profile would wait.
func (d *decision) hint() time.Duration {
	h := min(d.a.RetryAfter, d.c.Hold.MaxHint)
	if d.a.HoldCeiling > 0 {
		h = min(h, d.a.HoldCeiling)
	}
	return h
}

// changed counts a decision the fleet changed through b, and shows b.
func (d *decision) changed(b *Bucket, e effect) {
	b.changed++
	d.f.effects[e].Add(1)
	d.show = b
}

// stopped is the answer that stops the retry for r, showing b.
func (d *decision) stopped(b *Bucket, r Reason, e effect, why string) (Answer, bool) {
	d.changed(b, e)
	return Answer{Reason: r, Why: why, State: d.f.state(d.c, b, d.now, true)}, true
}

// fits says whether a wait of w fits the caller's deadline and ceiling.
func (d *decision) fits(w time.Duration) bool { return d.a.MaxWait == 0 || w <= d.a.MaxWait }

// stopStep (1): a stopped key: nothing on it can succeed.
func (d *decision) stopStep() (Answer, bool) {
	if !d.a.Switches.Stop {
		return Answer{}, false
	}
	for _, b := range []*Bucket{d.au, d.rl} {
		if b != nil && d.now.Before(b.stopUntil) {
			return d.stopped(b, ReasonStop, effectStop, fmt.Sprintf("the fleet stopped this key for %v more: %s",
				b.stopUntil.Sub(d.now).Round(time.Second), b.stopWhy))
		}
	}
	return Answer{}, false
}

// breakerStep (2): an open breaker stops the retry or makes it wait out the
// open period in its slot; a half-open one lets it go as the probe when a
// probe is due (in this replica's claimed slot, for a shared fleet).
func (d *decision) breakerStep() (Answer, bool) {
	av, c, now := d.av, d.c, d.now
	if !d.a.Switches.Breaker || av == nil || av.state == Closed {
		return Answer{}, false
	}
	if d.parked() {
		// The client's gate parks the retry until the daemon releases it
		// (a probe permit, the close's release slot): no wait to guess,
		// no stop at a longest wait, no budget token spent.
		d.parks = true
		d.changed(av, effectCircuit)
		return Answer{}, false
	}
	wait, what := av.openUntil.Sub(now), "open"
	if av.state == HalfOpen {
		if !av.nextProbe.After(now.Add(c.Breaker.ProbeInterval)) {
			at := av.nextProbe
			if at.Before(now) {
				at = now
			}
			// A shared fleet's probe goes in this replica's claimed slot
			// (one replica per interval); without one, the syncer claims.
			slotted := d.f.shared == nil || now.Before(av.probeSlot)
			if !slotted {
				av.wantProbe = true
				d.f.shared.poke()
			}
			if p := at.Sub(now); slotted && d.fits(max(d.delay, p)) {
				av.probeSlot = time.Time{}
				av.nextProbe = at.Add(c.Breaker.ProbeInterval)
				d.probe = true
				if p > d.delay {
					d.delay = p
				}
				d.changed(av, effectProbe)
			}
		}
		wait, what = av.nextProbe.Sub(now)+c.Breaker.CloseAfter, "half-open (probing)"
	}
	if d.probe {
		return Answer{}, false
	}
	why := fmt.Sprintf("the fleet's breaker for %s is %s for %v more: %s", av.key, what, wait.Round(time.Second), av.openWhy)
	if d.a.CanFallBack {
		return d.stopped(av, ReasonCircuitOpen, effectCircuit, why)
	}
	wait += d.f.spread(c, av)
	if wait > longestWait(c) || !d.fits(max(d.delay, wait)) {
		return d.stopped(av, ReasonCircuitOpen, effectCircuit, why)
	}
	if wait > d.delay {
		d.delay = wait
	}
	d.changed(av, effectCircuit)
	return Answer{}, false
}

// holdStep (3): the key's and the model's shared cooldowns. Every retry
// under a hold takes the next release slot, even one whose own delay is
// longer: the slots count the waiters.
func (d *decision) holdStep() (Answer, bool) {
	if !d.a.Switches.Hold {
		return Answer{}, false
	}
	for _, b := range []*Bucket{d.rl, d.av} {
		if b == nil || !d.now.Before(b.holdUntil) {
			continue
		}
		wait := b.holdUntil.Sub(d.now) + d.f.slot(b.waiters, b.releaseWindow(&d.c.Hold))
		b.waiters++
		if c := d.a.HintCeiling; c > 0 && wait > c {
			switch d.a.AboveCeiling {
			case CeilingIgnore:
				continue
			case CeilingClamp:
				wait = c
			default:
				return d.stopped(b, ReasonAboveCeiling, effectHold, fmt.Sprintf("the fleet's shared cooldown on %s (%v left, with this agent's release slot) is above the %v ceiling for a server's delay",
					b.key, wait.Round(time.Second), c))
			}
		}
		if wait <= d.delay {
			continue
		}
		if !d.fits(wait) {
			return d.stopped(b, ReasonDeadline, effectDeadline, fmt.Sprintf("the fleet's shared cooldown on %s (%v left, with this agent's release slot) would pass the deadline",
				b.key, wait.Round(time.Second)))
		}
		d.delay = wait
		d.changed(b, effectHold)
	}
	return Answer{}, false
}

// budgetStep (4): the retry budget (probes are already limited fleet-wide),
// for the retries of a failing model: a rate limit's retries are paced by
// its hold, the server's own word, and a key's by its stop.
func (d *decision) budgetStep() (Answer, bool) {
	av, c, now, a := d.av, d.c, d.now, d.a
	if !a.Switches.Budget || av == nil || d.probe || d.parks || (d.tracked && d.scope != ScopeAvailability) {
		return Answer{}, false
	}
	av.ensureRings(&c.Breaker)
	av.asks.add(now, 1)
	av.refill(now, c)
	if av.tokens < 1 {
		if !av.exhausted {
			av.exhausted = true
			d.emit(Event{At: now, Key: av.key, Kind: EventBudgetExhausted, ClientID: a.ClientID,
				Reason: fmt.Sprintf("retries outran the budget of %.2g per second (burst %.2g)", av.refillRate(now, c), av.burst(now, c))})
		}
		rate := av.refillRate(now, c)
		why := fmt.Sprintf("the fleet's retry budget for %s is spent (%.2g retries per second)", av.key, rate)
		if a.CanFallBack {
			return d.stopped(av, ReasonBudget, effectBudget, why)
		}
		wait := time.Duration((1 - av.tokens) / rate * float64(time.Second))
		if wait > longestWait(c) || !d.fits(max(d.delay, wait)) {
			return d.stopped(av, ReasonBudget, effectBudget, why)
		}
		if wait > d.delay {
			d.delay = wait
			d.changed(av, effectPaced)
		}
	}
	av.tokens--
	return Answer{}, false
}

// parked says whether the asking client's gate parks its retries: it
// streams reports on the failure's availability bucket (within the
// breaker's window), so the daemon can wake it.
func (d *decision) parked() bool {
	at, ok := d.av.streamClients[d.a.ClientID]
	return ok && d.now.Sub(time.Unix(0, at)) < d.c.Breaker.Window && !d.a.CanFallBack
}

// spread is a waiter's slot behind an open breaker, over the open period,
// so that agents waiting it out do not return in the same instant.
//
// The window is the open period, but at most the first one (OpenFor): a
// re-opened breaker's longer period would spread its waiters past the
// longest wait (longestWait), and they would all stop instead.
func (f *Fleet) spread(c *Config, b *Bucket) time.Duration {
	d := f.slot(b.waiters, min(b.openPeriod, c.Breaker.OpenFor))
	b.waiters++
	return d
}

// longestWait is the longest the fleet makes an agent without a stream
// wait behind a breaker or an empty budget: two first open periods (10 s by
// default). (A streamed client's gate parks its retries instead, and the
// daemon wakes them: parked.) The daemon cannot wake an agent it told to
// sleep, so an agent sent to sleep through a
// 60-s open period, or to the end of a queue of paced retries, sleeps through
// the provider's recovery too: in the simulation (`make simulate`,
// docs/fleet-simulation.md) waits of up to the strategy's 120-s ceiling
// kept goodput below 95 % for 80 s after a full outage ended, and every
// paced retry past the budget's refill was one more attempt on a provider
// that was down (amplification 1.13). Past this wait the agent stops (CIRCUIT_OPEN or
// RETRY_BUDGET_EXHAUSTED) and its caller decides, as a breaker's callers
// do elsewhere (Hystrix and Polly fail fast while open).
func longestWait(c *Config) time.Duration { return 2 * c.Breaker.OpenFor }

func (f *Fleet) stateIfActive(c *Config, b *Bucket, now time.Time, changed bool) *State {
	if b == nil || (!changed && !b.active(now)) {
		return nil
	}
	return f.state(c, b, now, changed)
}

// state renders b for a decision.
func (f *Fleet) state(c *Config, b *Bucket, now time.Time, changed bool) *State {
	s := &State{Bucket: b.key.String(), Breaker: b.state, Tokens: b.tokens, BudgetExhausted: b.exhausted, Changed: changed}
	if b.tokensAt.IsZero() {
		s.Tokens = c.Budget.Burst
	}
	var why []string
	if now.Before(b.holdUntil) {
		s.HoldLeft = b.holdUntil.Sub(now)
		why = append(why, fmt.Sprintf("shared cooldown %v left, %d agents waiting", s.HoldLeft.Round(100*time.Millisecond), b.waiters))
	}
	switch b.state {
	case Open:
		s.OpenLeft = b.openUntil.Sub(now)
		why = append(why, "breaker open: "+b.openWhy)
	case HalfOpen:
		why = append(why, "breaker half-open: probing")
	}
	if now.Before(b.stopUntil) {
		s.Stopped, s.OpenLeft = true, b.stopUntil.Sub(now)
		why = append(why, "stopped: "+b.stopWhy)
	}
	if b.exhausted {
		why = append(why, "retry budget spent")
	}
	s.Reason = strings.Join(why, "; ")
	return s
}

// maybeSweep forgets idle buckets, at most once a minute.
func (f *Fleet) maybeSweep(c *Config, now time.Time) {
	last := f.lastSweep.Load()
	if now.UnixNano()-last < int64(time.Minute) || !f.lastSweep.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	f.store.sweep(func(b *Bucket) bool {
		return !b.active(now) && now.Sub(b.lastFailure) > c.IdleAfter && now.Sub(b.reportedAt) > c.IdleAfter &&
			now.Sub(b.streamedElsewhere) > c.IdleAfter
	})
}

// Available says whether a fallback target can take traffic: its breaker is
// not open and its key is not stopped. why says what is in the way.
func (f *Fleet) Available(t Target) (ok bool, why string) {
	now := f.clock()
	sc := f.cfg.Load().Scopes
	keys := [3]Key{sc.key(ScopeAvailability, t), sc.key(ScopeAuth, t), sc.key(ScopeRateLimit, t)}
	f.store.lock()
	bs := f.store.getThree(keys, [3]bool{}, now)
	defer f.store.unlock()
	// Read only: the transitions happen (and are journaled) in Decide.
	if av := bs[0]; av != nil && av.state == Open && now.Before(av.openUntil) {
		return false, fmt.Sprintf("%s: breaker open", av.key)
	}
	for _, b := range bs[1:] {
		if b != nil && now.Before(b.stopUntil) {
			return false, fmt.Sprintf("%s: stopped", b.key)
		}
	}
	return true, ""
}
