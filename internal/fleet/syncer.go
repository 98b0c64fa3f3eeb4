package fleet

import (
	"context"
	"sync/atomic"
	"time"
)

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
// replica's notification, and at each of the fleet's ticks (Fleet.Run)
// otherwise, so that a hold extended or a count changed here reaches the
// exchange within a tick.
func (s *Syncer) Run(ctx context.Context) {
	wake := s.ex.Wake()
	for {
		woken := false
		select {
		case <-ctx.Done():
			return
		case <-s.f.shared.wake:
		case <-wake:
			woken = true
		case <-s.f.NextTick():
		}
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

	if len(out.clears)+len(out.raise)+len(out.moves) > 0 || urgent {
		s.pushes.Add(1)
	}
	for _, v := range out.clears {
		if err := s.ex.ClearRegisters(ctx, v); err != nil {
			return err
		}
	}
	if len(out.clears) > 0 {
		f.clearsPushed(out.clears)
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

// maxSharedName is the longest tenant, provider, model or key id the
// exchange keeps (the journal's limit, as for fleet events). A bucket with a
// longer name stays this replica's own.
const maxSharedName = 256
