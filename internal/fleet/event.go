package fleet

import "time"

// EventKind is a fleet transition, as the journal's fleet_events names it.
type EventKind string

const (
	EventHoldSet         EventKind = "hold_set"
	EventBreakerOpen     EventKind = "breaker_open"
	EventBreakerHalfOpen EventKind = "breaker_half_open"
	EventBreakerClose    EventKind = "breaker_close"
	EventBudgetExhausted EventKind = "budget_exhausted"
	EventFleetStop       EventKind = "fleet_stop"
	// EventShed: clients' gates did not send first attempts at once, at
	// most one event a second per bucket, counting the calls of every
	// report since the last (counts: shed, the first attempts not admitted;
	// fell_back, those of them sent to the assignment's fallback; parked,
	// those parked at their first check; a count of 0 is left out).
	EventShed EventKind = "shed"
	// EventSlowStart: a breaker closed and the gates admit a rising share of
	// first attempts.
	EventSlowStart EventKind = "slow_start"
	// EventTenantLimit: a tenant reached one of its limits (counts: the
	// limit and how often it refused since the last such event), at most
	// one a minute per tenant and limit.
	EventTenantLimit EventKind = "tenant_limit"
	// EventCleared: an operator cleared a bucket's state (Fleet.Clear).
	EventCleared EventKind = "fleet_clear"
	// EventPace: the pace of a learnt request limit started, was cut after
	// 429s, was lifted by a success's headers, or ended (counts: rpm, the
	// limit; share_pct, the pace's share of it; cuts, the cuts it says).
	// Cuts come at most one event a second per bucket.
	EventPace EventKind = "pace"
)

// Event is one transition of a bucket.
type Event struct {
	At       time.Time
	Key      Key
	Kind     EventKind
	Reason   string
	ClientID string // whose failure caused it, when one did
	// Origin is who said it: the caller's authenticated identity and
	// address, when a call caused it.
	Origin Origin
	Counts map[string]int64
}

// Sink receives events. It is called outside the store's lock, on the
// deciding goroutine, so it must not block (the journal's recorder queues).
type Sink func([]Event)

// stamp records who caused the events a caller's failure or report made
// (those naming a client) as their origin.
func stamp(events []Event, who Origin) {
	for i := range events {
		if events[i].ClientID != "" && events[i].Origin == (Origin{}) {
			events[i].Origin = who
		}
	}
}
