package fleet

import (
	"fmt"
	"time"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/enums"
)

// BreakerState is a circuit breaker's state.
type BreakerState uint8

const (
	Closed BreakerState = iota
	Open
	HalfOpen
)

func (s BreakerState) String() string {
	switch s {
	case Open:
		return "open"
	case HalfOpen:
		return "half_open"
	}
	return "closed"
}

// Bucket is one bucket's state. Its fields are read and written only under
// the store's lock.
type Bucket struct {
	key         Key
	lastFailure time.Time
	firstClient string // whose failure started the current incident
	changed     int64  // decisions the fleet changed

	// hold: a shared cooldown, released in staggered slots.
	holdUntil time.Time
	holdSpan  time.Duration // the hold's length when set, which sizes the release window
	waiters   int           // retries already given a slot in this hold

	// stop: every agent on the key stops.
	stopUntil time.Time
	stopWhy   string

	// breaker
	state       BreakerState
	openUntil   time.Time
	openPeriod  time.Duration
	openWhy     string
	halfOpenAt  time.Time
	nextProbe   time.Time
	lastCounted time.Time
	window      ring
	clients     map[string]time.Time

	// budget
	tokens    float64
	tokensAt  time.Time
	exhausted bool
}

// Key is the bucket's name.
func (b *Bucket) Key() Key { return b.key }

// active says whether anything in the bucket still acts on decisions.
func (b *Bucket) active(now time.Time) bool {
	return now.Before(b.holdUntil) || now.Before(b.stopUntil) || b.state != Closed || b.exhausted
}

// countedForBreaker: the failure types that say a provider's model is
// failing for everyone.
func countedForBreaker(t policydv1.FailureType) bool {
	switch t {
	case policydv1.FailureType_FAILURE_TYPE_OVERLOADED, policydv1.FailureType_FAILURE_TYPE_SERVER_ERROR,
		policydv1.FailureType_FAILURE_TYPE_TIMEOUT, policydv1.FailureType_FAILURE_TYPE_CONNECTION_ERROR:
		return true
	}
	return false
}

// stopsKey: the failure types no agent on the same key can get past.
func stopsKey(t policydv1.FailureType) bool {
	switch t {
	case policydv1.FailureType_FAILURE_TYPE_AUTH_INVALID, policydv1.FailureType_FAILURE_TYPE_PERMISSION_DENIED,
		policydv1.FailureType_FAILURE_TYPE_QUOTA_EXHAUSTED:
		return true
	}
	return false
}

// advance moves the breaker along its timers: open → half-open when the
// open period ends, half-open → closed after CloseAfter with no counted
// failure.
func (b *Bucket) advance(now time.Time, c *BreakerConfig, emit func(Event)) {
	if b.state == Open && !now.Before(b.openUntil) {
		b.state, b.halfOpenAt, b.nextProbe = HalfOpen, b.openUntil, b.openUntil
		emit(Event{At: b.openUntil, Key: b.key, Kind: EventBreakerHalfOpen,
			Reason: fmt.Sprintf("open for %v; probing, 1 retry per %v for the fleet", b.openPeriod, c.ProbeInterval)})
	}
	if b.state == HalfOpen {
		quietSince := b.halfOpenAt
		if b.lastCounted.After(quietSince) {
			quietSince = b.lastCounted
		}
		if at := quietSince.Add(c.CloseAfter); !now.Before(at) {
			b.state, b.openPeriod = Closed, 0
			b.window.reset()
			clear(b.clients)
			emit(Event{At: at, Key: b.key, Kind: EventBreakerClose,
				Reason: fmt.Sprintf("no counted failure for %v while half-open", c.CloseAfter)})
		}
	}
}

// countFailure records a counted failure and opens the breaker when the
// window has enough of them from enough clients.
func (b *Bucket) countFailure(now time.Time, client string, t policydv1.FailureType, c *BreakerConfig, emit func(Event)) {
	b.lastCounted = now
	switch b.state {
	case Open:
		return
	case HalfOpen:
		// A failure while probing: the provider is not back.
		b.open(now, min(2*b.openPeriod, c.MaxOpenFor), client,
			fmt.Sprintf("a %s while half-open", typeName(t)), emit)
		return
	}
	if b.window.secs == nil {
		b.window = newRing(c.Window)
		b.clients = make(map[string]time.Time)
	}
	b.window.add(now, 1)
	if len(b.clients) < 1024 {
		b.clients[client] = now
	} else if _, ok := b.clients[client]; ok {
		b.clients[client] = now
	}
	failures := b.window.sum(now)
	if failures < c.Failures {
		return
	}
	clients := b.windowClients(now, c.Window)
	if clients < c.MinClients {
		return
	}
	b.open(now, c.OpenFor, client,
		fmt.Sprintf("%d failures in %v from %d clients (last: %s)", failures, c.Window, clients, typeName(t)), emit)
}

func (b *Bucket) windowClients(now time.Time, window time.Duration) int {
	n := 0
	for id, at := range b.clients {
		if now.Sub(at) < window {
			n++
		} else {
			delete(b.clients, id)
		}
	}
	return n
}

func (b *Bucket) open(now time.Time, period time.Duration, client, why string, emit func(Event)) {
	if period <= 0 {
		period = time.Second
	}
	b.state, b.openPeriod, b.openUntil, b.openWhy = Open, period, now.Add(period), why
	emit(Event{At: now, Key: b.key, Kind: EventBreakerOpen, ClientID: client,
		Reason: fmt.Sprintf("%s; open for %v", why, period),
		Counts: map[string]int64{"open_ms": period.Milliseconds()}})
}

// setHold moves the hold forward to now+hint (it never moves back).
func (b *Bucket) setHold(now time.Time, hint time.Duration, client string, emit func(Event)) {
	until := now.Add(hint)
	if !until.After(b.holdUntil) {
		return
	}
	if !now.Before(b.holdUntil) { // a new hold, not an extension
		b.waiters, b.holdSpan = 0, hint
		emit(Event{At: now, Key: b.key, Kind: EventHoldSet, ClientID: client,
			Reason: fmt.Sprintf("a server asked to wait %v", hint.Round(time.Millisecond)),
			Counts: map[string]int64{"hold_ms": hint.Milliseconds()}})
	}
	b.holdUntil = until
}

// slot is the i-th waiter's release offset after a hold or an open period:
// the i-th point of the van der Corput sequence (0, ½, ¼, ¾, ⅛, …) scaled to
// the release window. However many waiters come, and in whatever burst, the
// first n of them are spread evenly over the window, so the fleet returns
// at about n/window per second, never as one herd, without the daemon
// having to know n in advance. The first waiter leaves when the hold ends:
// a lone agent waits no longer than the server asked.
func slot(i int, window time.Duration) time.Duration {
	return time.Duration(vanDerCorput(i) * float64(window))
}

// vanDerCorput is i with its binary digits mirrored after the point.
func vanDerCorput(i int) float64 {
	v, base := 0.0, 0.5
	for ; i > 0; i >>= 1 {
		if i&1 == 1 {
			v += base
		}
		base /= 2
	}
	return v
}

// releaseWindow is how long after the hold its waiters are spread over.
func (b *Bucket) releaseWindow(c *HoldConfig) time.Duration {
	w := time.Duration(c.Spread * float64(b.holdSpan))
	return min(max(w, c.MinSpread), c.MaxSpread)
}

// refill brings the budget's tokens up to now.
func (b *Bucket) refill(now time.Time, c *BudgetConfig) {
	if b.tokensAt.IsZero() {
		b.tokens, b.tokensAt = c.Burst, now
		return
	}
	if dt := now.Sub(b.tokensAt); dt > 0 {
		b.tokens = min(c.Burst, b.tokens+c.Floor*dt.Seconds())
		b.tokensAt = now
	}
	if b.exhausted && b.tokens >= c.Burst/2 {
		b.exhausted = false
	}
}

func typeName(t policydv1.FailureType) string { return enums.Short(t) }
