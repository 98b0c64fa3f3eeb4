package fleet

import (
	"fmt"
	"strings"
	"sync"
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

	changesMu sync.Mutex
	changes   chan struct{} // closed at the next transition (NextTransition)

	shared *shared // nil: one replica (sync.go)
	// slotStride and slotOffset interleave the replicas' release slots
	// (sync.go): the i-th waiter here takes slot i×stride+offset.
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
)

// Ask is one failed attempt and what the caller's strategy answered.
type Ask struct {
	Target
	ClientID    string
	FailureType policydv1.FailureType
	Attempt     int
	// RetryAfter is the server's delay hint (0: none).
	RetryAfter time.Duration
	// RequestsPerMinute is the provider's request limit from the failure's
	// rate-limit headers (0: none), for pacing.
	RequestsPerMinute int64
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
	MaxWait  time.Duration
	Switches Switches
}

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
	scope, tracked := ScopeOf(a.FailureType)
	if a.Provider == "" {
		// No provider, no failure domain to share.
		return Answer{Retry: a.Retry, Delay: a.Delay}
	}
	cfg := f.cfg.Load()
	sc := cfg.Scopes
	keys := [3]Key{sc.key(ScopeRateLimit, a.Target), sc.key(ScopeAvailability, a.Target), sc.key(ScopeAuth, a.Target)}
	create := [3]bool{tracked && scope == ScopeRateLimit, tracked && scope == ScopeAvailability, tracked && scope == ScopeAuth && a.KeyID != ""}
	var events []Event
	emit := func(e Event) { events = append(events, e) }
	f.store.lock()
	bs := f.store.getThree(keys, create)
	ans := f.decide(cfg, &a, now, scope, tracked, bs[0], bs[1], bs[2], emit)
	f.store.unlock()
	f.publish(events, a.Tenant)
	f.maybeSweep(cfg, now)
	return ans
}

func (f *Fleet) decide(c *Config, a *Ask, now time.Time, scope Scope, tracked bool, rl, av, au *Bucket, emit func(Event)) Answer {
	sw := a.Switches
	if av != nil {
		av.advance(now, c, emit)
	}
	var own *Bucket
	if tracked {
		own = [...]*Bucket{nil, rl, av, au}[scope]
	}

	// Record what this failure says.
	if rl != nil && a.RequestsPerMinute > 0 {
		rl.rpm = a.RequestsPerMinute
	}
	if rl != nil && a.FailureType == policydv1.FailureType_FAILURE_TYPE_RATE_LIMIT {
		rl.throttled(now)
	}
	if own != nil {
		if own.lastFailure.IsZero() || now.Sub(own.lastFailure) >= incidentGap {
			own.firstClient = a.ClientID // the first failure of a new run of them
		}
		own.lastFailure = now
		if sw.Hold && a.RetryAfter > 0 {
			own.setHold(now, a.RetryAfter, a.ClientID, emit)
		}
		if sw.Stop && stopsKey(a.FailureType) && a.KeyID != "" {
			if !now.Before(own.stopUntil) {
				own.stopWhy = fmt.Sprintf("%s on key %q: %s", typeName(a.FailureType), a.KeyID, strings.TrimSpace(a.Recovery))
				emit(Event{At: now, Key: own.key, Kind: EventFleetStop, ClientID: a.ClientID, Reason: own.stopWhy,
					Counts: map[string]int64{"stop_ms": c.Stop.For.Milliseconds()}})
			}
			own.stopUntil = now.Add(c.Stop.For)
			own.raisedStop = true
		}
		if sw.Breaker && own == av && countedForBreaker(a.FailureType) {
			av.countFailure(now, a.ClientID, a.FailureType, &c.Breaker, emit)
		}
	}

	ans := Answer{Retry: a.Retry, Delay: a.Delay}
	show := own
	changed := func(b *Bucket, e effect) {
		b.changed++
		f.effects[e].Add(1)
		show = b
	}
	stopped := func(b *Bucket, r Reason, e effect, why string) Answer {
		changed(b, e)
		return Answer{Reason: r, Why: why, State: f.state(c, b, now, true)}
	}
	if !a.Retry {
		return Answer{Delay: a.Delay, State: f.stateIfActive(c, own, now, false)}
	}
	fits := func(d time.Duration) bool { return a.MaxWait == 0 || d <= a.MaxWait }

	// 1. A stopped key: nothing on it can succeed.
	if sw.Stop {
		for _, b := range []*Bucket{au, rl} {
			if b != nil && now.Before(b.stopUntil) {
				return stopped(b, ReasonStop, effectStop, fmt.Sprintf("the fleet stopped this key for %v more: %s",
					b.stopUntil.Sub(now).Round(time.Second), b.stopWhy))
			}
		}
	}

	delay, probe := ans.Delay, false
	// 2. The breaker.
	if sw.Breaker && av != nil && av.state != Closed {
		wait, what := av.openUntil.Sub(now), "open"
		if av.state == HalfOpen {
			if !av.nextProbe.After(now.Add(c.Breaker.ProbeInterval)) {
				at := av.nextProbe
				if at.Before(now) {
					at = now
				}
				// A shared fleet's probe goes in this replica's claimed slot
				// (one replica per interval); without one, the syncer claims.
				slotted := f.shared == nil || now.Before(av.probeSlot)
				if !slotted {
					av.wantProbe = true
					f.shared.poke()
				}
				if p := at.Sub(now); slotted && fits(max(delay, p)) {
					av.probeSlot = time.Time{}
					av.nextProbe = at.Add(c.Breaker.ProbeInterval)
					probe = true
					if p > delay {
						delay = p
					}
					changed(av, effectProbe)
				}
			}
			wait, what = av.nextProbe.Sub(now)+c.Breaker.CloseAfter, "half-open (probing)"
		}
		if !probe {
			why := fmt.Sprintf("the fleet's breaker for %s is %s for %v more: %s", av.key, what, wait.Round(time.Second), av.openWhy)
			if a.CanFallBack {
				return stopped(av, ReasonCircuitOpen, effectCircuit, why)
			}
			wait += f.spread(c, av)
			if wait > longestWait(c) || !fits(max(delay, wait)) {
				return stopped(av, ReasonCircuitOpen, effectCircuit, why)
			}
			if wait > delay {
				delay = wait
			}
			changed(av, effectCircuit)
		}
	}

	// 3. Holds: the key's and the model's shared cooldowns.
	if sw.Hold {
		for _, b := range []*Bucket{rl, av} {
			if b == nil || !now.Before(b.holdUntil) {
				continue
			}
			// Every retry under the hold takes the next slot, even one whose
			// own delay is longer: the slots count the waiters.
			wait := b.holdUntil.Sub(now) + f.slot(b.waiters, b.releaseWindow(&c.Hold))
			b.waiters++
			if wait <= delay {
				continue
			}
			if !fits(wait) {
				return stopped(b, ReasonDeadline, effectDeadline, fmt.Sprintf("the fleet's shared cooldown on %s (%v left, with this agent's release slot) would pass the deadline or the ceiling",
					b.key, wait.Round(time.Second)))
			}
			delay = wait
			changed(b, effectHold)
		}
	}

	// 4. The retry budget (probes are already limited fleet-wide), for the
	// retries of a failing model: a rate limit's retries are paced by its
	// hold, the server's own word, and a key's by its stop.
	if sw.Budget && av != nil && !probe && (!tracked || scope == ScopeAvailability) {
		av.ensureRings(&c.Breaker)
		av.asks.add(now, 1)
		av.refill(now, c)
		if av.tokens < 1 {
			if !av.exhausted {
				av.exhausted = true
				emit(Event{At: now, Key: av.key, Kind: EventBudgetExhausted, ClientID: a.ClientID,
					Reason: fmt.Sprintf("retries outran the budget of %.2g per second (burst %.2g)", av.refillRate(now, c), av.burst(now, c))})
			}
			rate := av.refillRate(now, c)
			why := fmt.Sprintf("the fleet's retry budget for %s is spent (%.2g retries per second)", av.key, rate)
			if a.CanFallBack {
				return stopped(av, ReasonBudget, effectBudget, why)
			}
			wait := time.Duration((1 - av.tokens) / rate * float64(time.Second))
			if wait > longestWait(c) || !fits(max(delay, wait)) {
				return stopped(av, ReasonBudget, effectBudget, why)
			}
			if wait > delay {
				delay = wait
				changed(av, effectPaced)
			}
		}
		av.tokens--
	}

	ans.Retry, ans.Delay = true, delay
	ans.State = f.stateIfActive(c, show, now, delay != a.Delay)
	if ans.State == nil && av != nil && av != show {
		ans.State = f.stateIfActive(c, av, now, false)
	}
	return ans
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

// longestWait is the longest the fleet makes an agent wait behind a breaker
// or an empty budget: two first open periods (10 s by default). The daemon
// cannot wake an agent it told to sleep, so an agent sent to sleep through a
// 60-s open period, or to the end of a queue of paced retries, sleeps through
// the provider's recovery too: in the simulation (docs/fleet.md, `make
// simulate`) waits of up to the strategy's 120-s ceiling kept goodput below
// 95 % for 80 s after a full outage ended, and every paced retry past the
// budget's refill was one more attempt on a provider that was down
// (amplification 1.13). Past this wait the agent stops (CIRCUIT_OPEN or
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
		return !b.active(now) && now.Sub(b.lastFailure) > c.IdleAfter && now.Sub(b.reportedAt) > c.IdleAfter
	})
}

// Available says whether a fallback target can take traffic: its breaker is
// not open and its key is not stopped. why says what is in the way.
func (f *Fleet) Available(t Target) (ok bool, why string) {
	now := f.clock()
	sc := f.cfg.Load().Scopes
	keys := [3]Key{sc.key(ScopeAvailability, t), sc.key(ScopeAuth, t), sc.key(ScopeRateLimit, t)}
	f.store.lock()
	bs := f.store.getThree(keys, [3]bool{})
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
