package fleet

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
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

const (
	// countsEvery: how often a replica publishes its counts.
	countsEvery = time.Second
	// readEvery: how often a replica reads the others' changes without a
	// notification; fullReadEvery: how often it reads every verdict, since
	// a notification can be missed and sequence numbers can commit out of
	// order.
	readEvery     = time.Second
	fullReadEvery = 5 * time.Second
	// staleAfter: another replica's counts older than this are ignored (it
	// stopped, or the database is away and this replica decides alone).
	staleAfter = 3 * time.Second
	// maxSharedClients bounds the failing clients a replica names per bucket.
	maxSharedClients = 16
	// syncTimeout bounds one round of statements.
	syncTimeout = 2 * time.Second
	// sweepEvery and sweepIdle: how often a replica asks the exchange to
	// forget verdicts and replicas idle for sweepIdle (far longer than any
	// hold, stop or open period, so nothing in force is forgotten).
	sweepEvery = 10 * time.Minute
	sweepIdle  = time.Hour
)

// Sweeper is an Exchange that forgets idle verdicts and replicas.
type Sweeper interface {
	Sweep(ctx context.Context, now time.Time, idle time.Duration) (int64, error)
}

// SyncTick is how often the daemon's syncer runs a round without being
// woken: a hold extended or a count changed here reaches the exchange
// within it (new holds, stops and breaker transitions go at once).
const SyncTick = 250 * time.Millisecond

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

// remoteCounts is another replica's latest counts of a bucket.
type remoteCounts struct {
	at time.Time
	Counts
}

// fleetCounts are the other replicas' fresh counts of b, summed.
type fleetCounts struct {
	failures, successes, admitted, firstAttempts, retries, asks, probeOK int64
	rpm                                                                  int64
	replicas                                                             int // others with fresh counts
	streamed                                                             bool
}

func (b *Bucket) others(now time.Time) fleetCounts {
	var fc fleetCounts
	for _, r := range b.remote {
		if now.Sub(r.at) > staleAfter {
			continue
		}
		fc.replicas++
		if r.Version == b.version {
			// The breaker's counts restart at each transition: another
			// replica's from before the last one (it has not taken it yet)
			// would re-open a breaker that just closed.
			fc.failures += r.Failures
			fc.successes += r.Successes
		}
		fc.admitted += r.Admitted
		fc.firstAttempts += r.FirstAttempts
		fc.retries += r.Retries
		fc.asks += r.Asks
		if r.Version == b.version && b.state == HalfOpen {
			fc.probeOK += r.ProbeOK
		}
		fc.streamed = fc.streamed || r.Streamed
		fc.rpm = max(fc.rpm, r.RequestsPerMinute)
	}
	return fc
}

// otherClients counts the failing clients other replicas name that b's own
// window does not have.
func (b *Bucket) otherClients(now time.Time, window time.Duration) int {
	seen := map[string]bool{}
	for _, r := range b.remote {
		if now.Sub(r.at) > staleAfter {
			continue
		}
		if r.Version != b.version {
			continue
		}
		for _, id := range r.Clients {
			if at, ok := b.clients[id]; ok && now.Sub(at) < window {
				continue
			}
			seen[id] = true
		}
	}
	return len(seen)
}

// share is this replica's part of the bucket's retry budget: its share of
// the retries the replicas were asked for over the window, an even split
// among the replicas active on the bucket while nobody asked for any. Its
// own asks are taken as last published, like the others': counted live,
// a replica's own would outweigh the others' (a second old) and the shares
// would add up to more than the whole.
func (b *Bucket) share(now time.Time) float64 {
	if len(b.remote) == 0 {
		return 1
	}
	o := b.others(now)
	own := b.asksPublished
	if total := own + o.asks; total > 0 {
		// At least a small share: a replica whose first retry comes after a
		// quiet window still gets some budget until its asks count.
		return max(float64(own)/float64(total), 1/float64(4*(o.replicas+1)))
	}
	return 1 / float64(o.replicas+1)
}

// Syncer exchanges a shared fleet's verdicts and counts with the other
// replicas through an Exchange.
type Syncer struct {
	f  *Fleet
	ex Exchange

	seq, countsSeq                 int64
	readAt, fullAt, pubAt, sweepAt time.Time
	lastEmpty, needFull            bool
	up                             atomic.Bool
	peers                          atomic.Int32
	won, lost, errs, steps         atomic.Int64
	pushes                         atomic.Int64
	lastErr                        atomic.Pointer[string]
}

// NewSyncer returns the syncer of f, which must have been made WithReplica.
func NewSyncer(f *Fleet, ex Exchange) *Syncer {
	if f.shared == nil {
		panic("fleet.NewSyncer: the fleet was not made WithReplica")
	}
	s := &Syncer{f: f, ex: ex, needFull: true}
	return s
}

// SyncStats is what a Syncer shows in metrics and health.
type SyncStats struct {
	// Up: the last round reached the exchange.
	Up bool
	// Replicas: this one plus the others whose counts are fresh.
	Replicas int
	// Transitions this replica proposed that won and lost, rounds that
	// failed, rounds in all, rounds that pushed a register or a transition.
	Won, Lost, Errors, Rounds, Pushes int64
	LastError                         string
}

// Stats returns the syncer's state.
func (s *Syncer) Stats() SyncStats {
	st := SyncStats{Up: s.up.Load(), Replicas: 1 + int(s.peers.Load()), Won: s.won.Load(), Lost: s.lost.Load(),
		Errors: s.errs.Load(), Rounds: s.steps.Load(), Pushes: s.pushes.Load()}
	if p := s.lastErr.Load(); p != nil {
		st.LastError = *p
	}
	return st
}

// Run syncs until ctx ends: at once after a local transition or another
// replica's notification, and every tick otherwise. It also runs the
// fleet's timers (Tick), so that a breaker half-opens on time whether or
// not streams are connected.
func (s *Syncer) Run(ctx context.Context, tick time.Duration) {
	t := time.NewTicker(tick)
	defer t.Stop()
	wake := s.ex.Wake()
	for {
		woken := false
		select {
		case <-ctx.Done():
			return
		case <-s.f.shared.wake:
		case <-wake:
			woken = true
		case <-t.C:
		}
		s.f.Tick()
		sctx, cancel := context.WithTimeout(ctx, syncTimeout)
		_ = s.Step(sctx, woken)
		cancel()
	}
}

// Step runs one round: push the registers raised and the breaker moves
// made here, claim wanted probe slots, publish the counts when due, and
// read the others' changes when woken or due. It returns the first error;
// the replica then decides from its own state until a round succeeds.
func (s *Syncer) Step(ctx context.Context, woken bool) error {
	s.steps.Add(1)
	err := s.step(ctx, woken)
	if err != nil {
		s.errs.Add(1)
		msg := err.Error()
		s.lastErr.Store(&msg)
		s.up.Store(false)
		s.needFull = true
		s.peers.Store(0)
		s.f.slotStride.Store(1)
		return err
	}
	s.up.Store(true)
	return nil
}

func (s *Syncer) step(ctx context.Context, woken bool) error {
	f := s.f
	now, c := f.clock(), f.cfg.Load()
	urgent := f.countsUrgent()
	out := f.outbox(now, c, urgent || !now.Before(s.pubAt.Add(countsEvery)))
	if out.counts != nil {
		out.counts.Urgent = urgent
	}

	if len(out.raise)+len(out.moves) > 0 || urgent {
		s.pushes.Add(1)
	}
	if len(out.raise) > 0 {
		if err := s.ex.RaiseRegisters(ctx, out.raise); err != nil {
			return err
		}
		f.raised(out.raise)
	}
	for _, m := range out.moves {
		cur, won, err := s.ex.MoveBreaker(ctx, m.v, m.base)
		if err != nil {
			return err
		}
		if won {
			s.won.Add(1)
		} else {
			s.lost.Add(1)
		}
		f.settle(m, cur, won, c)
	}
	for _, p := range out.probes {
		ok, err := s.ex.ClaimProbe(ctx, p.key, p.version, now, c.Breaker.ProbeInterval, f.shared.replica)
		if err != nil {
			return err
		}
		f.probeClaimed(p, ok, now.Add(c.Breaker.ProbeInterval))
	}
	if out.counts != nil && !(len(out.counts.Buckets) == 0 && s.lastEmpty) {
		if err := s.ex.PublishCounts(ctx, *out.counts); err != nil {
			return err
		}
		s.pubAt, s.lastEmpty = now, len(out.counts.Buckets) == 0
	} else if out.counts != nil {
		s.pubAt = now
	}

	full := s.needFull || !now.Before(s.fullAt.Add(fullReadEvery))
	if !full && !woken && len(out.moves) == 0 && now.Before(s.readAt.Add(readEvery)) {
		return nil
	}
	seq, cseq := s.seq, s.countsSeq
	if full {
		seq, cseq = 0, 0
	}
	ch, err := s.ex.Read(ctx, f.shared.replica, seq, cseq)
	if err != nil {
		return err
	}
	s.seq, s.countsSeq = max(s.seq, ch.Seq), max(s.countsSeq, ch.CountsSeq)
	s.readAt = now
	if full {
		s.fullAt, s.needFull = now, false
	}
	f.apply(now, c, ch)
	s.peers.Store(int32(f.livePeers(now)))
	if sw, ok := s.ex.(Sweeper); ok && full && !now.Before(s.sweepAt.Add(sweepEvery)) {
		if s.sweepAt.IsZero() {
			s.sweepAt = now // not at start: a restarted replica has other work first
			return nil
		}
		s.sweepAt = now
		if _, err := sw.Sweep(ctx, now, sweepIdle); err != nil {
			return err
		}
	}
	return nil
}

// outbox is what a round pushes.
type outbox struct {
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
		Breaker: b.state, OpenUntil: b.openUntil, OpenPeriod: b.openPeriod, OpenWhy: b.openWhy, Version: b.version}
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
	f.store.Each(func(b *Bucket) {
		if !shareable(b.key) {
			return
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

// maxSharedName is the longest tenant, provider, model or key id the
// exchange keeps (the journal's limit, as for fleet events). A bucket with a
// longer name stays this replica's own.
const maxSharedName = 256

func shareable(k Key) bool {
	return len(k.Tenant) <= maxSharedName && len(k.Provider) <= maxSharedName &&
		len(k.Model) <= maxSharedName && len(k.KeyID) <= maxSharedName
}

// ownCounts are b's counts of this replica's own over the window, and
// false when it has none to share.
func (b *Bucket) ownCounts(now time.Time, c *Config) (Counts, bool) {
	if b.window.secs == nil {
		return Counts{}, false
	}
	bc := Counts{Key: b.key, Failures: int64(b.window.sum(now)), Successes: int64(b.successes.sum(now)),
		Admitted: int64(b.admitted.sum(now)), FirstAttempts: int64(b.firstAttempts.sum(now)), Retries: int64(b.retries.sum(now)),
		Streamed: b.streamed(now, &c.Breaker), RequestsPerMinute: b.rpm}
	b.rpmShared = b.rpm
	if b.asks.secs != nil {
		bc.Asks = int64(b.asks.sum(now))
		b.asksPublished = bc.Asks
	}
	bc.Version = b.version
	if b.state == HalfOpen {
		bc.ProbeOK = int64(b.probeOK)
	}
	b.probeOKShared = b.probeOK
	for id, at := range b.clients {
		if now.Sub(at) < c.Breaker.Window && len(bc.Clients) < maxSharedClients {
			bc.Clients = append(bc.Clients, id)
		}
	}
	sort.Strings(bc.Clients)
	if bc.Failures+bc.Successes+bc.FirstAttempts+bc.Retries+bc.Asks+bc.ProbeOK == 0 && !bc.Streamed {
		return Counts{}, false
	}
	return bc, true
}

// countsUrgent says whether the counts should go now, not at the next
// second: a bucket learned the provider's request limit (until the others
// know it, their gates admit every first attempt into the quota), or a
// half-open breaker's probe succeeded here (the breaker closes on the
// fleet's probe successes; a second's wait is a second more of shedding).
func (f *Fleet) countsUrgent() bool {
	urgent := false
	f.store.Each(func(b *Bucket) {
		urgent = urgent || (b.rpm > 0 && b.rpmShared != b.rpm) || (b.state == HalfOpen && b.probeOK != b.probeOKShared)
	})
	return urgent
}

// raised marks registers pushed (unless they moved again meanwhile).
func (f *Fleet) raised(vs []Verdict) {
	for _, v := range vs {
		bs := f.store.Acquire([3]Key{v.Key}, [3]bool{})
		if b := bs[0]; b != nil {
			if !b.holdUntil.After(v.HoldUntil) {
				b.raisedHold = false
			}
			if !b.stopUntil.After(v.StopUntil) {
				b.raisedStop = false
			}
		}
		f.store.Release()
	}
}

// settle takes a move's answer: a win journals its events; a loss adopts
// the winner's state and drops them (the winner journaled its own).
func (f *Fleet) settle(m move, cur Verdict, won bool, c *Config) {
	var events []Event
	bs := f.store.Acquire([3]Key{m.v.Key}, [3]bool{true})
	b := bs[0]
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
	f.store.Release()
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
	}
}

func (f *Fleet) probeClaimed(p probeWant, ok bool, until time.Time) {
	bs := f.store.Acquire([3]Key{p.key}, [3]bool{})
	if b := bs[0]; b != nil {
		b.wantProbe = false
		if ok && b.version == p.version {
			b.probeSlot = until
		}
	}
	f.store.Release()
}

// apply takes the other replicas' verdicts and counts.
func (f *Fleet) apply(now time.Time, c *Config, ch Changes) {
	changed := false
	var events []Event
	emit := func(e Event) { events = append(events, e) }
	for _, v := range ch.Verdicts {
		bs := f.store.Acquire([3]Key{v.Key}, [3]bool{true})
		if b := bs[0]; b != nil {
			if b.adoptRegisters(v, now) {
				changed = true
			}
			if v.Version > b.version {
				before := b.state
				f.shared.take(b.key, false)
				b.adoptBreaker(v, now)
				changed = changed || b.state != before
			}
		}
		f.store.Release()
	}
	for _, rc := range ch.Counts {
		if rc.Replica == f.shared.replica {
			continue
		}
		listed := make(map[Key]bool, len(rc.Buckets))
		for _, bc := range rc.Buckets {
			listed[bc.Key] = true
			bs := f.store.Acquire([3]Key{bc.Key}, [3]bool{true})
			if b := bs[0]; b != nil {
				if b.remote == nil {
					b.remote = map[string]remoteCounts{}
				}
				if prev, ok := b.remote[rc.Replica]; !ok || !prev.at.After(rc.At) {
					b.remote[rc.Replica] = remoteCounts{at: rc.At, Counts: bc}
				}
				if bc.Streamed && rc.At.After(b.reportedAt) {
					b.reportedAt = rc.At
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
			f.store.Release()
		}
		// A bucket the replica no longer lists has no counts there.
		f.store.Each(func(b *Bucket) {
			if r, ok := b.remote[rc.Replica]; ok && !listed[b.key] && r.at.Before(rc.At) {
				delete(b.remote, rc.Replica)
			}
		})
	}
	f.publish(events, "")
	if changed {
		f.wakeStreams()
	}
}

// adoptRegisters raises b's hold and stop to another replica's, and says
// whether either moved.
func (b *Bucket) adoptRegisters(v Verdict, now time.Time) bool {
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
	f.store.Each(func(b *Bucket) {
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
	f.changesMu.Lock()
	if f.changes != nil {
		close(f.changes)
		f.changes = nil
	}
	f.changesMu.Unlock()
}
