package fleet

import (
	"context"
	"sync"
	"time"
)

// The fleet's time has one owner, Run, which the daemon's composition root
// starts: it moves the breakers along their timers and wakes the Coordinate
// streams and the Syncer, which have no timers of their own. (Decisions
// and reports still advance the buckets they touch, so that an answer never
// reads a timer that ran out; the simulation drives Tick on its own clock.)

// TickEvery is how often Run ticks: a breaker's open period that ends
// reaches the streams within it, and a stream's refreshes and a Syncer's
// rounds run on it.
const TickEvery = 250 * time.Millisecond

// tickMin is the least time between two Ticks' walks over the buckets.
const tickMin = 200 * time.Millisecond

// Run owns the fleet's clock until ctx ends: every TickEvery it runs Tick
// and then wakes whoever waits on NextTick.
func (f *Fleet) Run(ctx context.Context) {
	t := time.NewTicker(TickEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f.Tick()
		f.ticks.fire()
	}
}

// NextTick returns a channel that is closed at Run's next tick.
func (f *Fleet) NextTick() <-chan struct{} {
	return f.ticks.wait()
}

// Tick moves every breaker along its timers (open → half-open, a quiet
// half-open → closed), so that the streams hear of it when it happens, not
// at the next decision. Run calls it every TickEvery.
func (f *Fleet) Tick() {
	now, c := f.clock(), f.cfg.Load()
	last := f.lastTick.Load()
	if now.UnixNano()-last < int64(tickMin) || !f.lastTick.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	var events []Event
	emit := func(e Event) { events = append(events, e) }
	f.store.walk(func(b *Bucket) bool {
		if b.state != Closed {
			b.advance(now, c, emit)
		}
		b.expireLimits(now, c) // a limit no header carried for LimitTTL ends its pace now
		b.publishPace(emit)
		return false
	})
	// Events carry their bucket's tenant already (Each sees whole keys).
	f.publish(events, "")
	f.maybeSweep(c, now)
}

// NextTransition returns a channel that is closed at the fleet's next transition
// (a hold set, a key stopped, a breaker opened, half-opened or closed):
// the streams push assignments then.
func (f *Fleet) NextTransition() <-chan struct{} {
	return f.changes.wait()
}

// publish sends events to the sink (with tenant, when the events lack it)
// and wakes the streams.
func (f *Fleet) publish(events []Event, tenant string) {
	if len(events) == 0 {
		return
	}
	for i := range events {
		if events[i].Key.Tenant == "" {
			events[i].Key.Tenant = tenant
		}
	}
	all := events
	if f.shared != nil {
		f.shared.poke()
		events = f.shared.holdBack(events)
	}
	if f.sink != nil && len(events) > 0 {
		f.sink(events)
	}
	wake := false
	for _, e := range all {
		if e.Kind != EventShed && e.Kind != EventBudgetExhausted && e.Kind != EventTenantLimit {
			wake = true
		}
	}
	if !wake {
		return
	}
	f.changes.fire()
}

// Now is the fleet's clock.
func (f *Fleet) Now() time.Time { return f.clock() }

// broadcast wakes every waiter at once: wait returns a channel that the
// next fire closes. (A condition variable with a channel, so that waiters
// can select on it with their other events.)
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

func (b *broadcast) fire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}
