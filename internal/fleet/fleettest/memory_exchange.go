// Package fleettest supports tests of fleet memory shared by replicas: an
// in-memory fleet.Exchange (MemorySpace, one per simulated database, and a
// MemoryExchange per replica) and ExerciseExchange, the contract every
// Exchange meets, run against both the in-memory and the PostgreSQL
// exchange. With the in-memory one, the Syncer's tests and the simulation's
// replica runs need no database.
package fleettest

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/policyd/policyd/internal/dberr"
	"github.com/policyd/policyd/internal/fleet"
)

// MemorySpace is what the replicas of one fleet share, in memory: the
// verdicts (hold and stop registers, the breaker and its probe slot) and
// each replica's latest counts, under one sequence, as PostgreSQL's
// fleet_state and fleet_replicas keep them. It stores times to the
// microsecond and durations to the millisecond, like the PostgreSQL
// exchange, so that both read back the same values.
type MemorySpace struct {
	// Now stamps a verdict's last change for Sweep (PostgreSQL's own clock
	// in the real exchange). Default time.Now.
	Now func() time.Time

	down atomic.Bool

	mu       sync.Mutex
	seq      int64
	verdicts map[fleet.Key]*verdictRow
	replicas map[string]*countsRow
	members  []*MemoryExchange
}

type verdictRow struct {
	v            fleet.Verdict
	seq          int64
	probeAt      time.Time // zero: the slot is free
	probeReplica string
	updated      time.Time
}

type countsRow struct {
	rc  fleet.ReplicaCounts
	seq int64
}

// NewMemorySpace returns an empty space.
func NewMemorySpace() *MemorySpace {
	return &MemorySpace{verdicts: make(map[fleet.Key]*verdictRow), replicas: make(map[string]*countsRow)}
}

// Exchanges returns n replicas' exchanges on a new space, and a no-op
// close: the shape the simulation's replica runs take.
func Exchanges(n int) ([]fleet.Exchange, func(), error) {
	space := NewMemorySpace()
	exs := make([]fleet.Exchange, 0, n)
	for range n {
		exs = append(exs, space.Open())
	}
	return exs, func() {}, nil
}

// Open returns a new replica's exchange on the space.
func (s *MemorySpace) Open() *MemoryExchange {
	x := &MemoryExchange{space: s, wake: make(chan struct{}, 1)}
	s.mu.Lock()
	s.members = append(s.members, x)
	s.mu.Unlock()
	return x
}

func (s *MemorySpace) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// SetDown makes the space unreachable (every call fails with
// dberr.ErrUnavailable, as the PostgreSQL exchange's do while the database
// is away) or reachable again; coming back wakes every exchange, as a
// listener that reconnects does.
func (s *MemorySpace) SetDown(down bool) {
	s.down.Store(down)
	if !down {
		s.mu.Lock()
		s.announce(nil)
		s.mu.Unlock()
	}
}

// announce wakes every exchange but from (under s.mu).
func (s *MemorySpace) announce(from *MemoryExchange) {
	for _, m := range s.members {
		if m != from && !m.closed.Load() {
			m.signal()
		}
	}
}

// MemoryExchange is one replica's fleet.Exchange on a MemorySpace. It is
// safe for concurrent use.
type MemoryExchange struct {
	space  *MemorySpace
	wake   chan struct{}
	closed atomic.Bool
}

var _ fleet.Exchange = (*MemoryExchange)(nil)

// Close makes every later call fail with dberr.ErrUnavailable, as a closed
// PostgreSQL exchange does.
func (x *MemoryExchange) Close() { x.closed.Store(true) }

// Wake implements fleet.Exchange.
func (x *MemoryExchange) Wake() <-chan struct{} { return x.wake }

func (x *MemoryExchange) signal() {
	select {
	case x.wake <- struct{}{}:
	default:
	}
}

// lock takes the space's lock unless x is closed or ctx ended.
func (x *MemoryExchange) lock(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("fleet exchange: %s: %w", op, err)
	}
	if x.closed.Load() || x.space.down.Load() {
		return fmt.Errorf("fleet exchange: %s: %w", op, dberr.ErrUnavailable)
	}
	x.space.mu.Lock()
	return nil
}

func checkKey(op string, k fleet.Key) error {
	if k.Scope.String() == "" {
		return fmt.Errorf("fleet exchange: %s: %w", op, dberr.Invalid("scope", "%d is not a fleet scope", k.Scope))
	}
	return nil
}

func dbTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.Truncate(time.Microsecond).UTC()
}

func dbSpan(d time.Duration) time.Duration { return d.Truncate(time.Millisecond) }

func cutWhy(s string) string {
	const maxWhyLen = 1024
	if utf8.RuneCountInString(s) <= maxWhyLen {
		return s
	}
	return string([]rune(s)[:maxWhyLen])
}

// ClearRegisters implements fleet.Exchange: the hold and stop the clear
// names are emptied, unless the row has a later clear.
func (x *MemoryExchange) ClearRegisters(ctx context.Context, v fleet.Verdict) error {
	const op = "clear registers"
	if err := checkKey(op, v.Key); err != nil {
		return err
	}
	if v.ClearedAt.IsZero() {
		return fmt.Errorf("fleet exchange: %s: %w", op, dberr.Invalid("cleared_at", "is required"))
	}
	if err := x.lock(ctx, op); err != nil {
		return err
	}
	s := x.space
	defer s.mu.Unlock()
	at := dbTime(v.ClearedAt)
	r := s.verdicts[v.Key]
	if r == nil {
		r = &verdictRow{v: fleet.Verdict{Key: v.Key}}
		s.verdicts[v.Key] = r
	} else if !at.After(r.v.ClearedAt) {
		return nil
	}
	if v.Cleared.Hold {
		r.v.HoldUntil, r.v.HoldSpan = time.Time{}, 0
	}
	if v.Cleared.Stop {
		r.v.StopUntil, r.v.StopWhy = time.Time{}, ""
	}
	r.v.ClearedAt, r.v.Cleared = at, v.Cleared
	s.seq++
	r.seq, r.updated = s.seq, s.now()
	s.announce(x)
	return nil
}

// RaiseRegisters implements fleet.Exchange: holds and stops only move
// forward; a row where nothing moves keeps its seq.
func (x *MemoryExchange) RaiseRegisters(ctx context.Context, vs []fleet.Verdict) error {
	const op = "raise registers"
	for _, v := range vs {
		if v.HoldUntil.IsZero() && v.StopUntil.IsZero() {
			continue
		}
		if err := checkKey(op, v.Key); err != nil {
			return err
		}
	}
	if err := x.lock(ctx, op); err != nil {
		return err
	}
	s := x.space
	defer s.mu.Unlock()
	moved := false
	for _, v := range vs {
		if v.HoldUntil.IsZero() && v.StopUntil.IsZero() {
			continue
		}
		hold, stop := dbTime(v.HoldUntil), dbTime(v.StopUntil)
		r := s.verdicts[v.Key]
		if r == nil {
			r = &verdictRow{v: fleet.Verdict{Key: v.Key}}
			s.verdicts[v.Key] = r
		} else if !hold.After(r.v.HoldUntil) && !stop.After(r.v.StopUntil) {
			continue
		}
		if hold.After(r.v.HoldUntil) {
			r.v.HoldUntil, r.v.HoldSpan = hold, dbSpan(v.HoldSpan)
		}
		if stop.After(r.v.StopUntil) {
			r.v.StopUntil, r.v.StopWhy = stop, cutWhy(v.StopWhy)
		}
		s.seq++
		r.seq, r.updated, moved = s.seq, s.now(), true
	}
	if moved {
		s.announce(x)
	}
	return nil
}

// MoveBreaker implements fleet.Exchange: a compare-and-set on Version.
func (x *MemoryExchange) MoveBreaker(ctx context.Context, v fleet.Verdict, base int64) (fleet.Verdict, bool, error) {
	const op = "move breaker"
	err := checkKey(op, v.Key)
	if err == nil && base < 0 {
		err = fmt.Errorf("fleet exchange: %s: %w", op, dberr.Invalid("version", "must not be negative, got %d", base))
	}
	if err == nil && v.Breaker > fleet.HalfOpen {
		err = fmt.Errorf("fleet exchange: %s: %w", op, dberr.Invalid("breaker", "%d is not a breaker state", v.Breaker))
	}
	if err != nil {
		return fleet.Verdict{}, false, err
	}
	if err := x.lock(ctx, op); err != nil {
		return fleet.Verdict{}, false, err
	}
	s := x.space
	defer s.mu.Unlock()
	r := s.verdicts[v.Key]
	if r == nil && base == 0 {
		r = &verdictRow{v: fleet.Verdict{Key: v.Key}}
		s.verdicts[v.Key] = r
	}
	if r == nil {
		return fleet.Verdict{Key: v.Key}, false, nil
	}
	if r.v.Version != base {
		return r.v, false, nil
	}
	r.v.Breaker, r.v.OpenUntil, r.v.OpenPeriod, r.v.OpenWhy = v.Breaker, dbTime(v.OpenUntil), dbSpan(v.OpenPeriod), cutWhy(v.OpenWhy)
	r.v.Version = base + 1
	r.probeAt, r.probeReplica = time.Time{}, ""
	s.seq++
	r.seq, r.updated = s.seq, s.now()
	s.announce(x)
	return r.v, true, nil
}

// ClaimProbe implements fleet.Exchange: one claim per interval wins.
func (x *MemoryExchange) ClaimProbe(ctx context.Context, key fleet.Key, version int64, now time.Time, interval time.Duration, replica string) (bool, error) {
	const op = "claim probe"
	if err := checkKey(op, key); err != nil {
		return false, err
	}
	if err := x.lock(ctx, op); err != nil {
		return false, err
	}
	s := x.space
	defer s.mu.Unlock()
	r := s.verdicts[key]
	now = dbTime(now)
	if r == nil || r.v.Version != version || r.v.Breaker != fleet.HalfOpen ||
		(!r.probeAt.IsZero() && r.probeAt.After(now.Add(-interval))) {
		return false, nil
	}
	r.probeAt, r.probeReplica = now, replica
	return true, nil
}

// PublishCounts implements fleet.Exchange: a replica's counts replace its
// previous ones; urgent ones wake the others.
func (x *MemoryExchange) PublishCounts(ctx context.Context, rc fleet.ReplicaCounts) error {
	const op = "publish counts"
	if rc.Replica == "" {
		return fmt.Errorf("fleet exchange: %s: %w", op, dberr.Invalid("replica", "is required"))
	}
	stored := fleet.ReplicaCounts{Replica: rc.Replica, At: rc.At.Truncate(time.Microsecond).UTC()}
	for _, c := range rc.Buckets {
		if err := checkKey(op, c.Key); err != nil {
			return err
		}
		c.Clients = slices.Clone(c.Clients)
		if len(c.Clients) == 0 {
			c.Clients = nil
		}
		stored.Buckets = append(stored.Buckets, c)
	}
	if err := x.lock(ctx, op); err != nil {
		return err
	}
	s := x.space
	defer s.mu.Unlock()
	s.seq++
	s.replicas[rc.Replica] = &countsRow{rc: stored, seq: s.seq}
	if rc.Urgent {
		s.announce(x)
	}
	return nil
}

// Read implements fleet.Exchange.
func (x *MemoryExchange) Read(ctx context.Context, replica string, seq, countsSeq int64) (fleet.Changes, error) {
	if err := x.lock(ctx, "read"); err != nil {
		return fleet.Changes{}, err
	}
	s := x.space
	defer s.mu.Unlock()
	ch := fleet.Changes{Seq: seq, CountsSeq: countsSeq}
	var rows []*verdictRow
	for _, r := range s.verdicts {
		if r.seq > seq {
			rows = append(rows, r)
		}
	}
	slices.SortFunc(rows, func(a, b *verdictRow) int { return cmp.Compare(a.seq, b.seq) })
	for _, r := range rows {
		ch.Verdicts = append(ch.Verdicts, r.v)
		ch.Seq = max(ch.Seq, r.seq)
	}
	var counts []*countsRow
	for name, r := range s.replicas {
		if name != replica && r.seq > countsSeq {
			counts = append(counts, r)
		}
	}
	slices.SortFunc(counts, func(a, b *countsRow) int { return cmp.Compare(a.seq, b.seq) })
	for _, r := range counts {
		rc := r.rc
		rc.Buckets = slices.Clone(rc.Buckets)
		ch.Counts = append(ch.Counts, rc)
		ch.CountsSeq = max(ch.CountsSeq, r.seq)
	}
	return ch, nil
}

// Sweep forgets what no replica needs any more, as the PostgreSQL
// exchange's Sweep does: verdicts whose hold and stop ended by now, whose
// breaker is closed and that nobody changed for idle (by the space's Now),
// and the counts of replicas that published nothing since now-idle.
func (x *MemoryExchange) Sweep(ctx context.Context, now time.Time, idle time.Duration) (int64, error) {
	if err := x.lock(ctx, "sweep"); err != nil {
		return 0, err
	}
	s := x.space
	defer s.mu.Unlock()
	var n int64
	quietSince := s.now().Add(-idle)
	for k, r := range s.verdicts {
		if !r.v.HoldUntil.After(now) && !r.v.StopUntil.After(now) && r.v.Breaker == fleet.Closed && r.updated.Before(quietSince) {
			delete(s.verdicts, k)
			n++
		}
	}
	for name, r := range s.replicas {
		if r.rc.At.Before(now.Add(-idle)) {
			delete(s.replicas, name)
			n++
		}
	}
	return n, nil
}
