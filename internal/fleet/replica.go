package fleet

import (
	"sort"
	"sync"
	"time"
)

// A fleet shared by replicas (WithReplica) keeps deciding from its own
// memory. Its Syncer pushes what this replica changed and pulls what the
// others did:
//
//   - holds and stops are registers that only move forward, raised at once;
//   - a breaker transition made here is proposed to the Exchange by
//     compare-and-set on the breaker's version: the winner's events are
//     journaled, a loser adopts the winner's state and drops its own;
//   - each replica publishes its counts over the breaker's window about once
//     a second, and adds the others' to its own: breakers open on the
//     fleet's failure rate, pacing divides the fleet's demand, and a
//     replica's retry budget is the fleet's times its share of the retries;
//   - while half-open, a retry decided here goes as a probe only in a probe
//     slot this replica claimed: one replica per probe interval.

// shared is a replica's part of a shared fleet.
type shared struct {
	replica string
	wake    chan struct{} // a local transition to push (buffered 1)

	mu   sync.Mutex
	held map[Key][]Event // breaker events whose transition has not won yet
}

// WithReplica makes the fleet one replica, named id, of a fleet its Syncer
// shares with others.
func WithReplica(id string) Option {
	return func(f *Fleet) {
		f.shared = &shared{replica: id, wake: make(chan struct{}, 1), held: map[Key][]Event{}}
	}
}

// Replica is the fleet's replica id ("" when not shared).
func (f *Fleet) Replica() string {
	if f.shared == nil {
		return ""
	}
	return f.shared.replica
}

// isBreakerEvent: the events a breaker transition emits, journaled by the
// replica whose transition wins.
func isBreakerEvent(k EventKind) bool {
	switch k {
	case EventBreakerOpen, EventBreakerHalfOpen, EventBreakerClose, EventSlowStart:
		return true
	}
	return false
}

// holdBack keeps the breaker events of a shared fleet until their
// transition wins, and returns the others.
func (s *shared) holdBack(events []Event) []Event {
	out := events[:0:0]
	s.mu.Lock()
	for _, e := range events {
		if isBreakerEvent(e.Kind) {
			s.held[e.Key] = append(s.held[e.Key], e)
			continue
		}
		out = append(out, e)
	}
	s.mu.Unlock()
	return out
}

func (s *shared) take(k Key, keep bool) []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	ev := s.held[k]
	delete(s.held, k)
	if !keep {
		return nil
	}
	return ev
}

func (s *shared) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// outbox is what a round pushes.
type outbox struct {
	clears []Verdict
	raise  []Verdict
	moves  []move
	probes []probeWant
	counts *ReplicaCounts
}

type move struct {
	v     Verdict
	base  int64
	moves int64 // the bucket's local transitions when the move was taken
}

type probeWant struct {
	key     Key
	version int64
}

func verdictOf(b *Bucket) Verdict {
	v := Verdict{Key: b.key, HoldUntil: b.holdUntil, HoldSpan: b.holdSpan, StopUntil: b.stopUntil, StopWhy: b.stopWhy,
		Breaker: b.state, OpenUntil: b.openUntil, OpenPeriod: b.openPeriod, OpenWhy: b.openWhy, Version: b.version,
		ClearedAt: b.cleared, Cleared: b.clearedWhat}
	if b.state == Closed && !b.closedAt.IsZero() {
		// A closed breaker's OpenUntil is when it closed: the others start
		// their slow start from it, not from when they hear of the close.
		v.OpenUntil = b.closedAt
	}
	return v
}

// outbox collects, under the lock, what this replica has to push.
func (f *Fleet) outbox(now time.Time, c *Config, counts bool) outbox {
	var out outbox
	if counts {
		out.counts = &ReplicaCounts{Replica: f.shared.replica, At: now}
	}
	f.store.each(func(b *Bucket) {
		if !shareable(b.key) {
			return
		}
		if b.raisedClear {
			out.clears = append(out.clears, verdictOf(b))
		}
		if b.raisedHold || b.raisedStop {
			out.raise = append(out.raise, verdictOf(b))
		}
		if b.moves != b.movesPushed {
			out.moves = append(out.moves, move{v: verdictOf(b), base: b.version, moves: b.moves})
		}
		if b.wantProbe && b.state == HalfOpen && b.moves == b.movesPushed && b.version > 0 && !now.Before(b.probeSlot) {
			out.probes = append(out.probes, probeWant{key: b.key, version: b.version})
		}
		if counts {
			if bc, ok := b.ownCounts(now, c); ok {
				out.counts.Buckets = append(out.counts.Buckets, bc)
			}
		}
	})
	if out.counts != nil {
		sort.Slice(out.counts.Buckets, func(i, j int) bool { return out.counts.Buckets[i].Key.String() < out.counts.Buckets[j].Key.String() })
	}
	return out
}

func shareable(k Key) bool {
	return len(k.Tenant) <= maxSharedName && len(k.Provider) <= maxSharedName &&
		len(k.Model) <= maxSharedName && len(k.KeyID) <= maxSharedName
}

// countsUrgent says whether the counts should go now, not at the next
// second: a bucket learned the provider's request limit (until the others
// know it, their gates admit every first attempt into the quota), or a
// half-open breaker's probe succeeded here (the breaker closes on the
// fleet's probe successes; a second's wait is a second more of shedding).
func (f *Fleet) countsUrgent() bool {
	urgent := false
	f.store.each(func(b *Bucket) {
		urgent = urgent || b.limitsShared != b.limitsPerMinute() || (b.state == HalfOpen && b.probeOK != b.probeOKShared)
	})
	return urgent
}

// clearsPushed marks clears pushed (unless another came meanwhile).
func (f *Fleet) clearsPushed(vs []Verdict) {
	f.store.lock()
	for _, v := range vs {
		if b := f.store.get(v.Key, false, time.Time{}); b != nil && b.cleared.Equal(v.ClearedAt) {
			b.raisedClear = false
		}
	}
	f.store.unlock()
}

// raised marks registers pushed (unless they moved again meanwhile).
func (f *Fleet) raised(vs []Verdict) {
	for _, v := range vs {
		f.store.lock()
		if b := f.store.get(v.Key, false, time.Time{}); b != nil {
			if !b.holdUntil.After(v.HoldUntil) {
				b.raisedHold = false
			}
			if !b.stopUntil.After(v.StopUntil) {
				b.raisedStop = false
			}
		}
		f.store.unlock()
	}
}

// settle takes a move's answer: a win journals its events; a loss adopts
// the winner's state and drops them (the winner journaled its own).
func (f *Fleet) settle(m move, cur Verdict, won bool, c *Config) {
	var events []Event
	f.store.lock()
	b := f.store.get(m.v.Key, true, f.clock())
	if b != nil {
		if won {
			b.version = cur.Version
			if b.moves == m.moves {
				b.movesPushed = m.moves
			}
			events = f.shared.take(b.key, true)
		} else if cur.Version < m.base {
			// The shared row is gone (swept while idle) or older: propose
			// again from its version.
			b.version = cur.Version
		} else {
			f.shared.take(b.key, false)
			b.adoptBreaker(cur, f.clock())
		}
	}
	f.store.unlock()
	if len(events) > 0 && f.sink != nil {
		f.sink(events)
	}
	if !won {
		f.wakeStreams()
	}
}

// adoptBreaker takes another replica's breaker state, newer than ours,
// dropping a local transition that was based on an older one.
func (b *Bucket) adoptBreaker(v Verdict, now time.Time) {
	if v.Version <= b.version && b.moves == b.movesPushed {
		return
	}
	if v.Version < b.version {
		return
	}
	b.movesPushed = b.moves
	b.version = v.Version
	if v.Breaker == b.state && v.OpenUntil.Equal(b.openUntil) {
		return
	}
	prev, prevOpenUntil := b.state, b.openUntil
	b.state, b.openUntil, b.openPeriod, b.openWhy = v.Breaker, v.OpenUntil, v.OpenPeriod, v.OpenWhy
	b.probeOK, b.probeSlot = 0, time.Time{}
	switch v.Breaker {
	case HalfOpen:
		b.halfOpenAt, b.nextProbe = v.OpenUntil, v.OpenUntil
	case Closed:
		if prev != Closed {
			b.openPeriod = 0
			b.window.reset()
			b.successes.reset()
			clear(b.clients)
		}
		// The slow start runs from the winner's close (verdictOf), as on
		// one replica: counted from when this replica hears of it, its
		// gates would admit less than the winner's for the whole ramp. A
		// verdict whose OpenUntil is not after the open period this replica
		// knows carries no close time (a replica before this change sent
		// the open period's end): the ramp starts now.
		b.closedAt = now
		if v.OpenUntil.After(prevOpenUntil) && v.OpenUntil.Before(now) {
			b.closedAt = v.OpenUntil
		}
		if prev != Closed {
			b.startRelease(b.closedAt, ReleaseFactor, false) // this replica's parked calls (release.go)
		}
	}
	if prev == Closed && v.Breaker == Open && b.admitted.secs != nil {
		b.baseRate = float64(int64(b.admitted.sum(now))+b.others(now).admitted) / float64(len(b.admitted.secs))
	}
}

func (f *Fleet) probeClaimed(p probeWant, ok bool, until time.Time) {
	f.store.lock()
	if b := f.store.get(p.key, false, time.Time{}); b != nil {
		b.wantProbe = false
		if ok && b.version == p.version {
			b.probeSlot = until
		}
	}
	f.store.unlock()
}

// apply takes the other replicas' verdicts and counts.
func (f *Fleet) apply(now time.Time, c *Config, ch Changes) {
	changed := false
	var events []Event
	emit := func(e Event) { events = append(events, e) }
	for _, v := range ch.Verdicts {
		f.store.lock()
		if b := f.store.get(v.Key, true, now); b != nil {
			if b.adoptRegisters(v, now, c) {
				changed = true
			}
			if b.adoptClear(v, now) {
				changed = true
			}
			if v.Version > b.version {
				before := b.state
				f.shared.take(b.key, false)
				b.adoptBreaker(v, now)
				changed = changed || b.state != before
			}
		}
		f.store.unlock()
	}
	for _, rc := range ch.Counts {
		if rc.Replica == f.shared.replica {
			continue
		}
		listed := make(map[Key]bool, len(rc.Buckets))
		for _, bc := range rc.Buckets {
			listed[bc.Key] = true
			f.store.lock()
			if b := f.store.get(bc.Key, true, now); b != nil {
				if b.remote == nil {
					b.remote = map[string]remoteCounts{}
				}
				if prev, ok := b.remote[rc.Replica]; !ok || !prev.at.After(rc.At) {
					b.remote[rc.Replica] = remoteCounts{at: rc.At, Counts: bc}
				}
				if bc.Streamed && rc.At.After(b.streamedElsewhere) {
					b.streamedElsewhere = rc.At
				}
				b.ensureRings(&c.Breaker)
				// The fleet's counts may cross the threshold here, with no
				// failure of this replica's own to look at them.
				if bc.Failures > 0 && b.key.Scope == ScopeAvailability {
					first := b.firstClient // whose failure began the incident here, else there
					if first == "" && len(bc.Clients) > 0 {
						first = bc.Clients[0]
					}
					b.maybeOpen(now, first, "failures counted by other replicas", &c.Breaker, emit)
				}
			}
			f.store.unlock()
		}
		// A bucket the replica no longer lists has no counts there.
		f.store.each(func(b *Bucket) {
			if r, ok := b.remote[rc.Replica]; ok && !listed[b.key] && r.at.Before(rc.At) {
				delete(b.remote, rc.Replica)
			}
		})
	}
	f.store.lock()
	events = append(events, f.store.takeLimits()...)
	f.store.unlock()
	f.publish(events, "")
	if changed {
		f.wakeStreams()
	}
}

// adoptRegisters raises b's hold and stop to another replica's, and says
// whether either moved. A hold is not taken past hold.max_hint from when
// it was set (its end less its span): a row written before the ceiling,
// or by a replica configured otherwise, must not hold the fleet for a
// week. (From when it was set, not from now: a bound that moved with the
// clock would renew the hold at every read.)
func (b *Bucket) adoptRegisters(v Verdict, now time.Time, c *Config) bool {
	if v.HoldSpan > c.Hold.MaxHint {
		v.HoldUntil, v.HoldSpan = v.HoldUntil.Add(c.Hold.MaxHint-v.HoldSpan), c.Hold.MaxHint
	}
	moved := false
	if v.HoldUntil.After(b.holdUntil) {
		if !now.Before(b.holdUntil) {
			b.waiters, b.holdSpan = 0, v.HoldSpan
			clear(b.holdSlots)
		}
		b.holdUntil = v.HoldUntil
		moved = true
	}
	if v.StopUntil.After(b.stopUntil) {
		b.stopUntil, b.stopWhy = v.StopUntil, v.StopWhy
		moved = true
	}
	return moved
}

// livePeers counts the other replicas with fresh counts on any bucket,
// and interleaves this replica's release slots with theirs: with N
// replicas, the one ranked r (by id) gives its i-th waiter slot i×N+r, so
// the replicas' waiters together take the first slots of one sequence,
// spread as evenly as one replica's, instead of N waiters on every slot.
func (f *Fleet) livePeers(now time.Time) int {
	seen := map[string]bool{}
	f.store.each(func(b *Bucket) {
		for id, r := range b.remote {
			if now.Sub(r.at) <= staleAfter {
				seen[id] = true
			}
		}
	})
	rank := 0
	for id := range seen {
		if id < f.shared.replica {
			rank++
		}
	}
	f.slotStride.Store(int32(len(seen) + 1))
	f.slotOffset.Store(int32(rank))
	return len(seen)
}

// slot is the i-th waiter's release offset (see slot), interleaved with
// the other replicas'.
func (f *Fleet) slot(i int, window time.Duration) time.Duration {
	if stride := int(f.slotStride.Load()); stride > 1 {
		i = i*stride + int(f.slotOffset.Load())
	}
	return slot(i, window)
}

// wakeStreams tells the streams the fleet changed.
func (f *Fleet) wakeStreams() {
	f.changes.fire()
}
