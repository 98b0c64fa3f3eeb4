package fleettest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/policyd/policyd/internal/dberr"
	"github.com/policyd/policyd/internal/fleet"
)

// Open returns another replica's exchange on one shared space, ready: its
// listener (if it has one) listens and its Wake is drained. The exchange is
// closed when t ends.
type Open func(t testing.TB) fleet.Exchange

// ExerciseExchange runs the contract every fleet.Exchange meets: forward-
// only registers, one winner per breaker compare-and-set, one probe claim
// per interval, counts replaced per replica and never read back by their
// own replica, and Wake on another replica's announced change (never on
// one's own). newSpace returns the opener of a fresh, empty space (a new
// database, a new MemorySpace) for each subtest.
func ExerciseExchange(t *testing.T, newSpace func(t *testing.T) Open) {
	t.Helper()
	for _, c := range []struct {
		name string
		run  func(t *testing.T, open Open)
	}{
		{"Registers", exerciseRegisters},
		{"MoveBreakerOnce", exerciseMoveBreakerOnce},
		{"ClaimProbe", exerciseClaimProbe},
		{"Counts", exerciseCounts},
		{"Wake", exerciseWake},
		{"ClearRegisters", exerciseClearRegisters},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, newSpace(t))
		})
	}
}

// T0 is the start of the contract's fixed clock.
var T0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

var (
	rlKey = fleet.Key{Scope: fleet.ScopeRateLimit, Tenant: "acme", Provider: "openai", Model: "gpt-4o", KeyID: "key-a"}
	avKey = fleet.Key{Scope: fleet.ScopeAvailability, Tenant: "acme", Provider: "openai", Model: "gpt-4o"}
)

// wakeWait bounds every wait for a Wake: generous, since a notification
// normally arrives within milliseconds.
const wakeWait = 20 * time.Second

// Woke waits up to d for x's Wake.
func Woke(x fleet.Exchange, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-x.Wake():
		return true
	case <-t.C:
		return false
	}
}

func raise(t testing.TB, x fleet.Exchange, vs ...fleet.Verdict) {
	t.Helper()
	if err := x.RaiseRegisters(context.Background(), vs); err != nil {
		t.Fatalf("RaiseRegisters: %v", err)
	}
}

func read(t testing.TB, x fleet.Exchange, replica string, seq, countsSeq int64) fleet.Changes {
	t.Helper()
	ch, err := x.Read(context.Background(), replica, seq, countsSeq)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	return ch
}

// verdictOf returns key's verdict in vs.
func verdictOf(t testing.TB, vs []fleet.Verdict, key fleet.Key) fleet.Verdict {
	t.Helper()
	for _, v := range vs {
		if v.Key == key {
			return v
		}
	}
	t.Fatalf("no verdict for %v in %+v", key, vs)
	return fleet.Verdict{}
}

// WantVerdict fails t unless got is want.
func WantVerdict(t testing.TB, got, want fleet.Verdict) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("verdict =\n  %+v\nwant\n  %+v", got, want)
	}
}

// WantField fails t unless err is a *dberr.InvalidError naming field.
func WantField(t testing.TB, err error, field string) {
	t.Helper()
	ie, ok := errors.AsType[*dberr.InvalidError](err)
	if !ok || !errors.Is(err, dberr.ErrInvalid) {
		t.Fatalf("error = %v, want an InvalidError naming %q", err, field)
	}
	if ie.Field != field {
		t.Fatalf("error names field %q (%v), want %q", ie.Field, err, field)
	}
}

// exerciseRegisters: holds and stops are max registers shared by
// the replicas; a write that moves nothing takes no new seq.
func exerciseRegisters(t *testing.T, open Open) {
	a, b := open(t), open(t)

	raise(t, a, fleet.Verdict{Key: rlKey, HoldUntil: T0.Add(10 * time.Second), HoldSpan: 10 * time.Second})
	ch := read(t, b, "b", 0, 0)
	if len(ch.Verdicts) != 1 || ch.Seq <= 0 || ch.CountsSeq != 0 || len(ch.Counts) != 0 {
		t.Fatalf("first read: %+v", ch)
	}
	want := fleet.Verdict{Key: rlKey, HoldUntil: T0.Add(10 * time.Second), HoldSpan: 10 * time.Second}
	WantVerdict(t, ch.Verdicts[0], want)
	seq := ch.Seq

	// A lower hold moves nothing: no new seq, the hold and its span stay.
	raise(t, a, fleet.Verdict{Key: rlKey, HoldUntil: T0.Add(5 * time.Second), HoldSpan: 5 * time.Second})
	raise(t, b, fleet.Verdict{Key: rlKey, HoldUntil: T0.Add(10 * time.Second), HoldSpan: time.Second}) // equal: no move either
	if ch := read(t, b, "b", seq, 0); len(ch.Verdicts) != 0 || ch.Seq != seq {
		t.Fatalf("after lower holds: %+v, want nothing newer than seq %d", ch, seq)
	}
	WantVerdict(t, read(t, a, "a", 0, 0).Verdicts[0], want)

	// A stop, with a lower hold: only the stop moves.
	raise(t, b, fleet.Verdict{Key: rlKey, HoldUntil: T0.Add(time.Second), HoldSpan: time.Second,
		StopUntil: T0.Add(time.Hour), StopWhy: "key revoked"})
	ch = read(t, a, "a", seq, 0)
	want.StopUntil, want.StopWhy = T0.Add(time.Hour), "key revoked"
	if len(ch.Verdicts) != 1 || ch.Seq <= seq {
		t.Fatalf("after the stop: %+v, want one verdict newer than seq %d", ch, seq)
	}
	WantVerdict(t, ch.Verdicts[0], want)
	seq = ch.Seq

	// A lower stop moves nothing.
	raise(t, a, fleet.Verdict{Key: rlKey, StopUntil: T0.Add(time.Minute), StopWhy: "quota"})
	if ch := read(t, b, "b", seq, 0); len(ch.Verdicts) != 0 || ch.Seq != seq {
		t.Fatalf("after a lower stop: %+v", ch)
	}

	// One call, several keys: duplicates merge (the latest ends win),
	// verdicts without registers are ignored, unchanged keys keep their seq.
	raise(t, a,
		fleet.Verdict{Key: avKey, HoldUntil: T0.Add(3 * time.Second), HoldSpan: 3 * time.Second},
		fleet.Verdict{Key: avKey, HoldUntil: T0.Add(7 * time.Second), HoldSpan: 7 * time.Second},
		fleet.Verdict{Key: avKey, HoldUntil: T0.Add(4 * time.Second), HoldSpan: 4 * time.Second, StopUntil: T0.Add(time.Minute), StopWhy: "down"},
		fleet.Verdict{Key: rlKey, HoldUntil: T0.Add(2 * time.Second)},
		fleet.Verdict{Key: fleet.Key{Scope: fleet.ScopeAuth, Tenant: "acme", Provider: "openai", KeyID: "k"}},
	)
	ch = read(t, b, "b", seq, 0)
	if len(ch.Verdicts) != 1 || ch.Seq <= seq {
		t.Fatalf("after the batch: %+v, want only the new key", ch)
	}
	WantVerdict(t, ch.Verdicts[0], fleet.Verdict{Key: avKey, HoldUntil: T0.Add(7 * time.Second), HoldSpan: 7 * time.Second,
		StopUntil: T0.Add(time.Minute), StopWhy: "down"})
	seq = ch.Seq

	// A later hold moves the hold and its span, not the stop.
	raise(t, b, fleet.Verdict{Key: rlKey, HoldUntil: T0.Add(20 * time.Second), HoldSpan: 20 * time.Second,
		StopUntil: T0.Add(time.Hour), StopWhy: "other"})
	ch = read(t, a, "a", seq, 0)
	want.HoldUntil, want.HoldSpan = T0.Add(20*time.Second), 20*time.Second
	if len(ch.Verdicts) != 1 {
		t.Fatalf("after a later hold: %+v", ch)
	}
	WantVerdict(t, ch.Verdicts[0], want)

	// Every verdict for seq 0, in seq order.
	ch = read(t, b, "b", 0, 0)
	if len(ch.Verdicts) != 2 || ch.Verdicts[0].Key != avKey || ch.Verdicts[1].Key != rlKey {
		t.Fatalf("read from 0: %+v", ch)
	}
	raise(t, a) // nothing to do

	err := a.RaiseRegisters(context.Background(), []fleet.Verdict{{Key: fleet.Key{Tenant: "acme"}, HoldUntil: T0}})
	WantField(t, err, "scope")
}

// exerciseMoveBreakerOnce: of the concurrent compare-and-sets from
// one version across replicas, exactly one wins, and the others get the
// winner's verdict.
func exerciseMoveBreakerOnce(t *testing.T, open Open) {
	ctx := context.Background()
	xs := []fleet.Exchange{open(t), open(t), open(t)}
	// rlKey's row exists (its registers) before its first transition;
	// avKey's does not.
	raise(t, xs[0], fleet.Verdict{Key: rlKey, HoldUntil: T0.Add(time.Minute), HoldSpan: time.Minute})

	const perExchange = 4
	type result struct {
		v   fleet.Verdict
		cur fleet.Verdict
		won bool
		err error
	}
	// race has every goroutine of every exchange move key from base.
	race := func(key fleet.Key, base int64, state fleet.BreakerState) []result {
		results := make([]result, len(xs)*perExchange)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range results {
			x := xs[i%len(xs)]
			v := fleet.Verdict{Key: key, Breaker: state, OpenUntil: T0.Add(time.Duration(30+i) * time.Second),
				OpenPeriod: time.Duration(30+i) * time.Second, OpenWhy: fmt.Sprintf("goroutine %d", i)}
			results[i].v = v
			wg.Go(func() {
				<-start
				results[i].cur, results[i].won, results[i].err = x.MoveBreaker(ctx, v, base)
			})
		}
		close(start)
		wg.Wait()
		return results
	}
	check := func(key fleet.Key, results []result, version int64, hold time.Time) fleet.Verdict {
		t.Helper()
		var winner *result
		for i := range results {
			r := &results[i]
			if r.err != nil {
				t.Fatalf("MoveBreaker: %v", r.err)
			}
			if r.won {
				if winner != nil {
					t.Fatalf("two winners: %q and %q", winner.v.OpenWhy, r.v.OpenWhy)
				}
				winner = r
			}
		}
		if winner == nil {
			t.Fatal("no winner")
		}
		want := winner.v
		want.Version, want.HoldUntil = version, hold
		if !hold.IsZero() {
			want.HoldSpan = time.Minute
		}
		WantVerdict(t, winner.cur, want)
		for _, r := range results {
			WantVerdict(t, r.cur, want)
		}
		return want
	}
	for _, tc := range []struct {
		key  fleet.Key
		hold time.Time
	}{{avKey, time.Time{}}, {rlKey, T0.Add(time.Minute)}} {
		check(tc.key, race(tc.key, 0, fleet.Open), 1, tc.hold)
		want := check(tc.key, race(tc.key, 1, fleet.HalfOpen), 2, tc.hold)

		// A stale base loses and gets the verdict as it is.
		cur, won, err := xs[2].MoveBreaker(ctx, fleet.Verdict{Key: tc.key, Breaker: fleet.Closed}, 1)
		if err != nil || won {
			t.Fatalf("MoveBreaker from a stale base: won %v, %v", won, err)
		}
		WantVerdict(t, cur, want)
		WantVerdict(t, verdictOf(t, read(t, xs[1], "b", 0, 0).Verdicts, tc.key), want)
	}

	// Nothing to move from a version the key never had.
	key := fleet.Key{Scope: fleet.ScopeAuth, Tenant: "acme", Provider: "openai", KeyID: "k"}
	cur, won, err := xs[0].MoveBreaker(ctx, fleet.Verdict{Key: key, Breaker: fleet.Open}, 3)
	if err != nil || won {
		t.Fatalf("MoveBreaker on a missing row from base 3: won %v, %v", won, err)
	}
	WantVerdict(t, cur, fleet.Verdict{Key: key})
	_, _, err = xs[0].MoveBreaker(ctx, fleet.Verdict{Key: key, Breaker: fleet.BreakerState(7)}, 0)
	WantField(t, err, "breaker")
}

// exerciseClaimProbe: a half-open breaker's probe slot goes to one
// replica per interval.
func exerciseClaimProbe(t *testing.T, open Open) {
	ctx := context.Background()
	xs := []fleet.Exchange{open(t), open(t), open(t)}
	move := func(state fleet.BreakerState, base int64) {
		t.Helper()
		if _, won, err := xs[0].MoveBreaker(ctx, fleet.Verdict{Key: avKey, Breaker: state}, base); err != nil || !won {
			t.Fatalf("MoveBreaker to %v from %d: won %v, %v", state, base, won, err)
		}
	}
	claim := func(x fleet.Exchange, version int64, now time.Time, replica string) bool {
		t.Helper()
		ok, err := x.ClaimProbe(ctx, avKey, version, now, time.Second, replica)
		if err != nil {
			t.Fatalf("ClaimProbe: %v", err)
		}
		return ok
	}
	// claims has 4 goroutines of every exchange claim at now; it returns
	// how many got the slot.
	claims := func(version int64, now time.Time) int {
		t.Helper()
		var (
			wg  sync.WaitGroup
			mu  sync.Mutex
			won int
		)
		start := make(chan struct{})
		for i := range 4 * len(xs) {
			x := xs[i%len(xs)]
			wg.Go(func() {
				<-start
				ok, err := x.ClaimProbe(ctx, avKey, version, now, time.Second, fmt.Sprintf("replica-%d", i))
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Errorf("ClaimProbe: %v", err)
				}
				if ok {
					won++
				}
			})
		}
		close(start)
		wg.Wait()
		return won
	}

	if claim(xs[0], 0, T0, "r") {
		t.Fatal("claimed the probe of a breaker that does not exist")
	}
	move(fleet.Open, 0)
	if claim(xs[0], 1, T0, "r") {
		t.Fatal("claimed the probe of an open breaker")
	}
	move(fleet.HalfOpen, 1)
	if n := claims(2, T0); n != 1 {
		t.Fatalf("%d concurrent claims won at T0, want 1", n)
	}
	if claim(xs[1], 2, T0.Add(500*time.Millisecond), "r") {
		t.Fatal("claimed again within the interval")
	}
	if !claim(xs[1], 2, T0.Add(time.Second), "r") {
		t.Fatal("no claim one interval later")
	}
	if n := claims(2, T0.Add(2500*time.Millisecond)); n != 1 {
		t.Fatalf("%d concurrent claims won in the next interval, want 1", n)
	}
	for _, v := range []int64{1, 3} {
		if claim(xs[2], v, T0.Add(time.Hour), "r") {
			t.Fatalf("claimed with version %d, the breaker is at 2", v)
		}
	}
	// A transition frees the slot, whenever it was last claimed.
	move(fleet.Open, 2)
	move(fleet.HalfOpen, 3)
	if !claim(xs[2], 4, T0.Add(2500*time.Millisecond), "r") {
		t.Fatal("no claim after a new half-open transition")
	}
}

// exerciseCounts: replicas' counts go round trip, a replica does
// not read its own, and a read brings only what is newer than its seq.
func exerciseCounts(t *testing.T, open Open) {
	ctx := context.Background()
	a, b := open(t), open(t)
	publish := func(x fleet.Exchange, rc fleet.ReplicaCounts) {
		t.Helper()
		if err := x.PublishCounts(ctx, rc); err != nil {
			t.Fatalf("PublishCounts: %v", err)
		}
	}
	rcA := fleet.ReplicaCounts{Replica: "a", At: T0.Add(1234567 * time.Microsecond), Buckets: []fleet.Counts{
		{Key: avKey, Failures: 3, Successes: 40, Admitted: 12, FirstAttempts: 15, Retries: 4, ProbeOK: 1, Version: 2,
			Clients: []string{"agent-1", "agent-2"}, Streamed: true, RequestsPerMinute: 500,
			InputTokensPerMinute: 30000, FirstAttemptTokens: 9000, RetryTokens: 400, Parked: 17,
			RecentFailures: 2, RecentSuccesses: 9, UsedTokens: 5200, UsedEstimates: 4000,
			OutputTokensPerMinute: 8000, OutputTokens: 2600, OutputCalls: 7},
		{Key: rlKey, Failures: 1 << 40},
		{Key: fleet.Key{Scope: fleet.ScopeAuth, Tenant: "other", Provider: "anthropic", KeyID: "k"}},
	}}
	publish(a, rcA)
	ch := read(t, b, "b", 0, 0)
	if len(ch.Counts) != 1 || ch.CountsSeq <= 0 || len(ch.Verdicts) != 0 || ch.Seq != 0 {
		t.Fatalf("read: %+v", ch)
	}
	if !reflect.DeepEqual(ch.Counts[0], rcA) {
		t.Fatalf("counts =\n  %+v\nwant\n  %+v", ch.Counts[0], rcA)
	}
	seq := ch.CountsSeq
	if ch := read(t, a, "a", 0, 0); len(ch.Counts) != 0 || ch.CountsSeq != 0 {
		t.Fatalf("a read its own counts: %+v", ch)
	}
	if ch := read(t, b, "b", 0, seq); len(ch.Counts) != 0 || ch.CountsSeq != seq {
		t.Fatalf("nothing newer: %+v", ch)
	}

	// A new publication replaces the replica's counts; b's own are not
	// read back by b; c's come after a's.
	rcA2 := fleet.ReplicaCounts{Replica: "a", At: T0.Add(2 * time.Second), Buckets: []fleet.Counts{{Key: avKey, Failures: 5}}}
	publish(a, rcA2)
	publish(b, fleet.ReplicaCounts{Replica: "b", At: T0.Add(2 * time.Second)})
	ch = read(t, b, "b", 0, seq)
	if len(ch.Counts) != 1 || ch.CountsSeq <= seq || !reflect.DeepEqual(ch.Counts[0], rcA2) {
		t.Fatalf("after a's second publication: %+v", ch)
	}
	seq = ch.CountsSeq
	rcC := fleet.ReplicaCounts{Replica: "c", At: T0.Add(3 * time.Second), Buckets: []fleet.Counts{}}
	publish(a, rcC)
	ch = read(t, b, "b", 0, seq)
	if len(ch.Counts) != 1 || ch.Counts[0].Replica != "c" || len(ch.Counts[0].Buckets) != 0 {
		t.Fatalf("after c's publication: %+v", ch)
	}
	ch = read(t, a, "a", 0, 0)
	if got := []string{ch.Counts[0].Replica, ch.Counts[1].Replica}; len(ch.Counts) != 2 || !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("a reads %+v, want b's and c's counts", ch.Counts)
	}

	// Counts and verdicts have their own seqs in one sequence.
	raise(t, a, fleet.Verdict{Key: avKey, HoldUntil: T0.Add(time.Minute)})
	ch = read(t, b, "b", 0, ch.CountsSeq)
	if len(ch.Verdicts) != 1 || len(ch.Counts) != 0 {
		t.Fatalf("after a verdict: %+v", ch)
	}

	err := a.PublishCounts(ctx, fleet.ReplicaCounts{At: T0})
	WantField(t, err, "replica")
}

// exerciseWake: a change on one replica wakes the others (LISTEN/
// NOTIFY), not itself, and what woke them is there to read.
func exerciseWake(t *testing.T, open Open) {
	ctx := context.Background()
	a, b := open(t), open(t)

	raise(t, a, fleet.Verdict{Key: rlKey, HoldUntil: T0.Add(time.Minute), HoldSpan: time.Minute})
	if !Woke(b, wakeWait) {
		t.Fatal("b not woken by a's hold")
	}
	ch := read(t, b, "b", 0, 0)
	if len(ch.Verdicts) != 1 || !ch.Verdicts[0].HoldUntil.Equal(T0.Add(time.Minute)) {
		t.Fatalf("b reads %+v after the wake", ch)
	}

	if _, won, err := a.MoveBreaker(ctx, fleet.Verdict{Key: avKey, Breaker: fleet.Open, OpenUntil: T0.Add(time.Minute)}, 0); err != nil || !won {
		t.Fatalf("MoveBreaker: won %v, %v", won, err)
	}
	if !Woke(b, wakeWait) {
		t.Fatal("b not woken by a's breaker")
	}
	if ch = read(t, b, "b", ch.Seq, 0); len(ch.Verdicts) != 1 || ch.Verdicts[0].Breaker != fleet.Open {
		t.Fatalf("b reads %+v after the breaker's wake", ch)
	}
	// b heard both notifications by now; a, whose changes they were, hears
	// none of its own.
	if Woke(a, 200*time.Millisecond) {
		t.Fatal("a woken by its own changes")
	}
}

// exerciseClearRegisters: a clear empties the registers it names (the only
// write that moves them back), is read by the others, and an older clear
// changes nothing.
func exerciseClearRegisters(t *testing.T, open Open) {
	a, b := open(t), open(t)
	raise(t, a, fleet.Verdict{Key: rlKey, HoldUntil: T0.Add(time.Hour), HoldSpan: time.Hour, StopUntil: T0.Add(time.Hour), StopWhy: "revoked"})
	seq := read(t, b, "b", 0, 0).Seq
	clearAt := T0.Add(time.Minute)
	if err := a.ClearRegisters(context.Background(), fleet.Verdict{Key: rlKey, ClearedAt: clearAt, Cleared: fleet.Clearing{Hold: true}}); err != nil {
		t.Fatal(err)
	}
	ch := read(t, b, "b", seq, 0)
	if len(ch.Verdicts) != 1 {
		t.Fatalf("after the clear: %+v, want the cleared verdict", ch)
	}
	WantVerdict(t, ch.Verdicts[0], fleet.Verdict{Key: rlKey, StopUntil: T0.Add(time.Hour), StopWhy: "revoked",
		ClearedAt: clearAt, Cleared: fleet.Clearing{Hold: true}})
	seq = ch.Seq
	// An older clear is ignored.
	if err := b.ClearRegisters(context.Background(), fleet.Verdict{Key: rlKey, ClearedAt: T0, Cleared: fleet.Clearing{Stop: true}}); err != nil {
		t.Fatal(err)
	}
	if ch := read(t, a, "a", seq, 0); len(ch.Verdicts) != 0 {
		t.Fatalf("after an older clear: %+v, want nothing new", ch)
	}
	// A hold raised after the clear moves forward again.
	raise(t, b, fleet.Verdict{Key: rlKey, HoldUntil: T0.Add(2 * time.Minute), HoldSpan: time.Minute})
	if v := verdictOf(t, read(t, a, "a", 0, 0).Verdicts, rlKey); !v.HoldUntil.Equal(T0.Add(2 * time.Minute)) {
		t.Fatalf("hold after the clear: %v", v.HoldUntil)
	}
	err := a.ClearRegisters(context.Background(), fleet.Verdict{Key: rlKey})
	WantField(t, err, "cleared_at")
}
