package journal_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/journal"
	"github.com/policyd/policyd/internal/journal/journaltest"
)

var (
	rlKey = fleet.Key{Scope: fleet.ScopeRateLimit, Tenant: "acme", Provider: "openai", Model: "gpt-4o", KeyID: "key-a"}
	avKey = fleet.Key{Scope: fleet.ScopeAvailability, Tenant: "acme", Provider: "openai", Model: "gpt-4o"}
)

// wakeWait bounds every wait for a Wake: generous, since a notification
// normally arrives within milliseconds.
const wakeWait = 20 * time.Second

// openExchange opens an exchange on url, closed when t ends, and waits
// until its listener listens (its first Wake).
func openExchange(t testing.TB, url string) *journal.FleetExchange {
	t.Helper()
	x, err := journal.OpenFleetExchange(context.Background(), url, journal.WithExchangeLogger(quiet))
	if err != nil {
		t.Fatalf("OpenFleetExchange: %v", err)
	}
	t.Cleanup(x.Close)
	if !woke(x, wakeWait) {
		t.Fatal("the listener did not connect (no first Wake)")
	}
	return x
}

// woke waits up to d for x's Wake.
func woke(x *journal.FleetExchange, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-x.Wake():
		return true
	case <-t.C:
		return false
	}
}

func drainWake(x *journal.FleetExchange) {
	select {
	case <-x.Wake():
	default:
	}
}

func raise(t testing.TB, x *journal.FleetExchange, vs ...fleet.Verdict) {
	t.Helper()
	if err := x.RaiseRegisters(context.Background(), vs); err != nil {
		t.Fatalf("RaiseRegisters: %v", err)
	}
}

func read(t testing.TB, x *journal.FleetExchange, replica string, seq, countsSeq int64) fleet.Changes {
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

func wantVerdict(t testing.TB, got, want fleet.Verdict) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("verdict =\n  %+v\nwant\n  %+v", got, want)
	}
}

// TestFleetExchangeRegisters: holds and stops are max registers shared by
// the replicas; a write that moves nothing takes no new seq.
func TestFleetExchangeRegisters(t *testing.T) {
	t.Parallel()
	url := journaltest.DatabaseURL(t)
	a, b := openExchange(t, url), openExchange(t, url)

	raise(t, a, fleet.Verdict{Key: rlKey, HoldUntil: t0.Add(10 * time.Second), HoldSpan: 10 * time.Second})
	ch := read(t, b, "b", 0, 0)
	if len(ch.Verdicts) != 1 || ch.Seq <= 0 || ch.CountsSeq != 0 || len(ch.Counts) != 0 {
		t.Fatalf("first read: %+v", ch)
	}
	want := fleet.Verdict{Key: rlKey, HoldUntil: t0.Add(10 * time.Second), HoldSpan: 10 * time.Second}
	wantVerdict(t, ch.Verdicts[0], want)
	seq := ch.Seq

	// A lower hold moves nothing: no new seq, the hold and its span stay.
	raise(t, a, fleet.Verdict{Key: rlKey, HoldUntil: t0.Add(5 * time.Second), HoldSpan: 5 * time.Second})
	raise(t, b, fleet.Verdict{Key: rlKey, HoldUntil: t0.Add(10 * time.Second), HoldSpan: time.Second}) // equal: no move either
	if ch := read(t, b, "b", seq, 0); len(ch.Verdicts) != 0 || ch.Seq != seq {
		t.Fatalf("after lower holds: %+v, want nothing newer than seq %d", ch, seq)
	}
	wantVerdict(t, read(t, a, "a", 0, 0).Verdicts[0], want)

	// A stop, with a lower hold: only the stop moves.
	raise(t, b, fleet.Verdict{Key: rlKey, HoldUntil: t0.Add(time.Second), HoldSpan: time.Second,
		StopUntil: t0.Add(time.Hour), StopWhy: "key revoked"})
	ch = read(t, a, "a", seq, 0)
	want.StopUntil, want.StopWhy = t0.Add(time.Hour), "key revoked"
	if len(ch.Verdicts) != 1 || ch.Seq <= seq {
		t.Fatalf("after the stop: %+v, want one verdict newer than seq %d", ch, seq)
	}
	wantVerdict(t, ch.Verdicts[0], want)
	seq = ch.Seq

	// A lower stop moves nothing.
	raise(t, a, fleet.Verdict{Key: rlKey, StopUntil: t0.Add(time.Minute), StopWhy: "quota"})
	if ch := read(t, b, "b", seq, 0); len(ch.Verdicts) != 0 || ch.Seq != seq {
		t.Fatalf("after a lower stop: %+v", ch)
	}

	// One call, several keys: duplicates merge (the latest ends win),
	// verdicts without registers are ignored, unchanged keys keep their seq.
	raise(t, a,
		fleet.Verdict{Key: avKey, HoldUntil: t0.Add(3 * time.Second), HoldSpan: 3 * time.Second},
		fleet.Verdict{Key: avKey, HoldUntil: t0.Add(7 * time.Second), HoldSpan: 7 * time.Second},
		fleet.Verdict{Key: avKey, HoldUntil: t0.Add(4 * time.Second), HoldSpan: 4 * time.Second, StopUntil: t0.Add(time.Minute), StopWhy: "down"},
		fleet.Verdict{Key: rlKey, HoldUntil: t0.Add(2 * time.Second)},
		fleet.Verdict{Key: fleet.Key{Scope: fleet.ScopeAuth, Tenant: "acme", Provider: "openai", KeyID: "k"}},
	)
	ch = read(t, b, "b", seq, 0)
	if len(ch.Verdicts) != 1 || ch.Seq <= seq {
		t.Fatalf("after the batch: %+v, want only the new key", ch)
	}
	wantVerdict(t, ch.Verdicts[0], fleet.Verdict{Key: avKey, HoldUntil: t0.Add(7 * time.Second), HoldSpan: 7 * time.Second,
		StopUntil: t0.Add(time.Minute), StopWhy: "down"})
	seq = ch.Seq

	// A later hold moves the hold and its span, not the stop.
	raise(t, b, fleet.Verdict{Key: rlKey, HoldUntil: t0.Add(20 * time.Second), HoldSpan: 20 * time.Second,
		StopUntil: t0.Add(time.Hour), StopWhy: "other"})
	ch = read(t, a, "a", seq, 0)
	want.HoldUntil, want.HoldSpan = t0.Add(20*time.Second), 20*time.Second
	if len(ch.Verdicts) != 1 {
		t.Fatalf("after a later hold: %+v", ch)
	}
	wantVerdict(t, ch.Verdicts[0], want)

	// Every verdict for seq 0, in seq order.
	ch = read(t, b, "b", 0, 0)
	if len(ch.Verdicts) != 2 || ch.Verdicts[0].Key != avKey || ch.Verdicts[1].Key != rlKey {
		t.Fatalf("read from 0: %+v", ch)
	}
	raise(t, a) // nothing to do

	err := a.RaiseRegisters(context.Background(), []fleet.Verdict{{Key: fleet.Key{Tenant: "acme"}, HoldUntil: t0}})
	wantField(t, err, "scope")
}

// TestFleetExchangeMoveBreakerOnce: of the concurrent compare-and-sets from
// one version across replicas, exactly one wins, and the others get the
// winner's verdict.
func TestFleetExchangeMoveBreakerOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := journaltest.DatabaseURL(t)
	xs := []*journal.FleetExchange{openExchange(t, url), openExchange(t, url), openExchange(t, url)}
	// rlKey's row exists (its registers) before its first transition;
	// avKey's does not.
	raise(t, xs[0], fleet.Verdict{Key: rlKey, HoldUntil: t0.Add(time.Minute), HoldSpan: time.Minute})

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
			v := fleet.Verdict{Key: key, Breaker: state, OpenUntil: t0.Add(time.Duration(30+i) * time.Second),
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
		wantVerdict(t, winner.cur, want)
		for _, r := range results {
			wantVerdict(t, r.cur, want)
		}
		return want
	}
	for _, tc := range []struct {
		key  fleet.Key
		hold time.Time
	}{{avKey, time.Time{}}, {rlKey, t0.Add(time.Minute)}} {
		check(tc.key, race(tc.key, 0, fleet.Open), 1, tc.hold)
		want := check(tc.key, race(tc.key, 1, fleet.HalfOpen), 2, tc.hold)

		// A stale base loses and gets the verdict as it is.
		cur, won, err := xs[2].MoveBreaker(ctx, fleet.Verdict{Key: tc.key, Breaker: fleet.Closed}, 1)
		if err != nil || won {
			t.Fatalf("MoveBreaker from a stale base: won %v, %v", won, err)
		}
		wantVerdict(t, cur, want)
		wantVerdict(t, verdictOf(t, read(t, xs[1], "b", 0, 0).Verdicts, tc.key), want)
	}

	// Nothing to move from a version the key never had.
	key := fleet.Key{Scope: fleet.ScopeAuth, Tenant: "acme", Provider: "openai", KeyID: "k"}
	cur, won, err := xs[0].MoveBreaker(ctx, fleet.Verdict{Key: key, Breaker: fleet.Open}, 3)
	if err != nil || won {
		t.Fatalf("MoveBreaker on a missing row from base 3: won %v, %v", won, err)
	}
	wantVerdict(t, cur, fleet.Verdict{Key: key})
	_, _, err = xs[0].MoveBreaker(ctx, fleet.Verdict{Key: key, Breaker: fleet.BreakerState(7)}, 0)
	wantField(t, err, "breaker")
}

// TestFleetExchangeClaimProbe: a half-open breaker's probe slot goes to one
// replica per interval.
func TestFleetExchangeClaimProbe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := journaltest.DatabaseURL(t)
	xs := []*journal.FleetExchange{openExchange(t, url), openExchange(t, url), openExchange(t, url)}
	move := func(state fleet.BreakerState, base int64) {
		t.Helper()
		if _, won, err := xs[0].MoveBreaker(ctx, fleet.Verdict{Key: avKey, Breaker: state}, base); err != nil || !won {
			t.Fatalf("MoveBreaker to %v from %d: won %v, %v", state, base, won, err)
		}
	}
	claim := func(x *journal.FleetExchange, version int64, now time.Time, replica string) bool {
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

	if claim(xs[0], 0, t0, "r") {
		t.Fatal("claimed the probe of a breaker that does not exist")
	}
	move(fleet.Open, 0)
	if claim(xs[0], 1, t0, "r") {
		t.Fatal("claimed the probe of an open breaker")
	}
	move(fleet.HalfOpen, 1)
	if n := claims(2, t0); n != 1 {
		t.Fatalf("%d concurrent claims won at t0, want 1", n)
	}
	if claim(xs[1], 2, t0.Add(500*time.Millisecond), "r") {
		t.Fatal("claimed again within the interval")
	}
	if !claim(xs[1], 2, t0.Add(time.Second), "r") {
		t.Fatal("no claim one interval later")
	}
	if n := claims(2, t0.Add(2500*time.Millisecond)); n != 1 {
		t.Fatalf("%d concurrent claims won in the next interval, want 1", n)
	}
	for _, v := range []int64{1, 3} {
		if claim(xs[2], v, t0.Add(time.Hour), "r") {
			t.Fatalf("claimed with version %d, the breaker is at 2", v)
		}
	}
	_, rows := journaltest.Query(t, url, `SELECT probe_at, probe_replica FROM fleet_state WHERE scope = 'availability'`)
	if len(rows) != 1 || rows[0][1] == "NULL" {
		t.Fatalf("probe slot: %v", rows)
	}

	// A transition frees the slot, whenever it was last claimed.
	move(fleet.Open, 2)
	move(fleet.HalfOpen, 3)
	if !claim(xs[2], 4, t0.Add(2500*time.Millisecond), "r") {
		t.Fatal("no claim after a new half-open transition")
	}
}

// TestFleetExchangeCounts: replicas' counts go round trip, a replica does
// not read its own, and a read brings only what is newer than its seq.
func TestFleetExchangeCounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := journaltest.DatabaseURL(t)
	a, b := openExchange(t, url), openExchange(t, url)
	publish := func(x *journal.FleetExchange, rc fleet.ReplicaCounts) {
		t.Helper()
		if err := x.PublishCounts(ctx, rc); err != nil {
			t.Fatalf("PublishCounts: %v", err)
		}
	}
	rcA := fleet.ReplicaCounts{Replica: "a", At: t0.Add(1234567 * time.Microsecond), Buckets: []fleet.Counts{
		{Key: avKey, Failures: 3, Successes: 40, Admitted: 12, FirstAttempts: 15, Retries: 4, ProbeOK: 1, Version: 2,
			Clients: []string{"agent-1", "agent-2"}, Streamed: true, RequestsPerMinute: 500},
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
	rcA2 := fleet.ReplicaCounts{Replica: "a", At: t0.Add(2 * time.Second), Buckets: []fleet.Counts{{Key: avKey, Failures: 5}}}
	publish(a, rcA2)
	publish(b, fleet.ReplicaCounts{Replica: "b", At: t0.Add(2 * time.Second)})
	ch = read(t, b, "b", 0, seq)
	if len(ch.Counts) != 1 || ch.CountsSeq <= seq || !reflect.DeepEqual(ch.Counts[0], rcA2) {
		t.Fatalf("after a's second publication: %+v", ch)
	}
	seq = ch.CountsSeq
	rcC := fleet.ReplicaCounts{Replica: "c", At: t0.Add(3 * time.Second), Buckets: []fleet.Counts{}}
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
	raise(t, a, fleet.Verdict{Key: avKey, HoldUntil: t0.Add(time.Minute)})
	ch = read(t, b, "b", 0, ch.CountsSeq)
	if len(ch.Verdicts) != 1 || len(ch.Counts) != 0 {
		t.Fatalf("after a verdict: %+v", ch)
	}

	err := a.PublishCounts(ctx, fleet.ReplicaCounts{At: t0})
	wantField(t, err, "replica")
}

// TestFleetExchangeWake: a change on one replica wakes the others (LISTEN/
// NOTIFY), not itself, and what woke them is there to read.
func TestFleetExchangeWake(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := journaltest.DatabaseURL(t)
	a, b := openExchange(t, url), openExchange(t, url)

	raise(t, a, fleet.Verdict{Key: rlKey, HoldUntil: t0.Add(time.Minute), HoldSpan: time.Minute})
	if !woke(b, wakeWait) {
		t.Fatal("b not woken by a's hold")
	}
	ch := read(t, b, "b", 0, 0)
	if len(ch.Verdicts) != 1 || !ch.Verdicts[0].HoldUntil.Equal(t0.Add(time.Minute)) {
		t.Fatalf("b reads %+v after the wake", ch)
	}

	if _, won, err := a.MoveBreaker(ctx, fleet.Verdict{Key: avKey, Breaker: fleet.Open, OpenUntil: t0.Add(time.Minute)}, 0); err != nil || !won {
		t.Fatalf("MoveBreaker: won %v, %v", won, err)
	}
	if !woke(b, wakeWait) {
		t.Fatal("b not woken by a's breaker")
	}
	if ch = read(t, b, "b", ch.Seq, 0); len(ch.Verdicts) != 1 || ch.Verdicts[0].Breaker != fleet.Open {
		t.Fatalf("b reads %+v after the breaker's wake", ch)
	}
	// b heard both notifications by now; a, whose changes they were, hears
	// none of its own.
	if woke(a, 200*time.Millisecond) {
		t.Fatal("a woken by its own changes")
	}
}

// TestFleetExchangeIdle: the listener's idle waits end in pings that keep
// its connection usable; notifications still arrive after many of them.
func TestFleetExchangeIdle(t *testing.T) {
	t.Parallel()
	url := journaltest.DatabaseURL(t)
	a := openExchange(t, url)
	b, err := journal.OpenFleetExchange(context.Background(), url, journal.WithExchangeLogger(quiet),
		journal.WithExchangePingInterval(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if !woke(b, wakeWait) {
		t.Fatal("the listener did not connect")
	}
	for i := range 5 {
		// About 20 idle waits and pings; a wake here would be a reconnection.
		if woke(b, 200*time.Millisecond) {
			t.Fatalf("round %d: b woken while idle (its listener reconnected?)", i)
		}
		raise(t, a, fleet.Verdict{Key: rlKey, HoldUntil: t0.Add(time.Duration(i+1) * time.Second)})
		if !woke(b, wakeWait) {
			t.Fatalf("round %d: b not woken after idling", i)
		}
	}
}

// TestFleetExchangeOutage stops PostgreSQL under two replicas' exchanges:
// calls fail with an error within their context; after the restart the
// listeners reconnect by themselves, and a change made while b's listener
// was away reaches b (its reconnection wakes it).
func TestFleetExchangeOutage(t *testing.T) {
	t.Parallel()
	srv := journaltest.NewServer(t) // our own cluster: stopping it disturbs no other test
	url := srv.DatabaseURL(t)
	a, b := openExchange(t, url), openExchange(t, url)
	raise(t, a, fleet.Verdict{Key: rlKey, HoldUntil: t0.Add(time.Second), HoldSpan: time.Second})
	if !woke(b, wakeWait) {
		t.Fatal("b not woken before the outage")
	}
	seq := read(t, b, "b", 0, 0).Seq

	srv.Stop(t)
	drainWake(b)
	calls := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"RaiseRegisters", func(ctx context.Context) error {
			return a.RaiseRegisters(ctx, []fleet.Verdict{{Key: rlKey, HoldUntil: t0.Add(2 * time.Second)}})
		}},
		{"MoveBreaker", func(ctx context.Context) error {
			_, _, err := a.MoveBreaker(ctx, fleet.Verdict{Key: rlKey, Breaker: fleet.Open}, 0)
			return err
		}},
		{"ClaimProbe", func(ctx context.Context) error {
			_, err := a.ClaimProbe(ctx, rlKey, 1, t0, time.Second, "a")
			return err
		}},
		{"PublishCounts", func(ctx context.Context) error {
			return a.PublishCounts(ctx, fleet.ReplicaCounts{Replica: "a", At: t0})
		}},
		{"Read", func(ctx context.Context) error { _, err := b.Read(ctx, "b", 0, 0); return err }},
	}
	for _, c := range calls {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		start := time.Now()
		err := c.call(ctx)
		cancel()
		d := time.Since(start)
		if err == nil {
			t.Fatalf("%s with the database down: no error", c.name)
		}
		if !errors.Is(err, journal.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s with the database down: %v, want ErrUnavailable or the context's deadline", c.name, err)
		}
		if d > 4*time.Second {
			t.Errorf("%s took %v to fail, past its 3s context", c.name, d)
		}
		t.Logf("%s failed after %v: %v", c.name, d.Round(time.Millisecond), err)
	}
	// Let the listeners' backoff grow (without asserting anything on time),
	// so that a's write below likely lands before b listens again.
	time.Sleep(1500 * time.Millisecond)
	if woke(b, 0) {
		t.Fatal("b woken while the database is down")
	}

	// At once after the restart, while b's listener is likely still
	// waiting out its backoff, a raises a hold (retrying: its pool may
	// hand out a connection of before the outage first).
	srv.Start(t)
	restarted := time.Now()
	hold := fleet.Verdict{Key: rlKey, HoldUntil: t0.Add(time.Hour), HoldSpan: time.Hour}
	deadline := restarted.Add(wakeWait)
	for {
		err := a.RaiseRegisters(context.Background(), []fleet.Verdict{hold})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("RaiseRegisters still failing %v after the restart: %v", wakeWait, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, rows := journaltest.Query(t, url, `SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN policyd_fleet'`)
	t.Logf("a wrote %v after the restart, with %s of the 2 listeners back", time.Since(restarted).Round(time.Millisecond), rows[0][0])
	got := awaitVerdict(t, b, seq, func(v fleet.Verdict) bool { return v.HoldUntil.Equal(hold.HoldUntil) })
	t.Logf("b saw the hold %v after the restart", time.Since(restarted).Round(time.Millisecond))
	wantVerdict(t, got, hold)

	// b's listener listens again: a's next change wakes it.
	drainWake(b)
	raise(t, a, fleet.Verdict{Key: avKey, HoldUntil: t0.Add(time.Hour)})
	if !woke(b, wakeWait) {
		t.Fatal("b not woken by a change after the restart")
	}
	if ch := read(t, b, "b", 0, 0); len(ch.Verdicts) != 2 {
		t.Fatalf("b reads %+v after the restart", ch)
	}
}

// awaitVerdict waits for x's Wake and reads (tolerating errors: the
// database may just be back) until a verdict newer than seq satisfies ok,
// and returns it.
func awaitVerdict(t testing.TB, x *journal.FleetExchange, seq int64, ok func(fleet.Verdict) bool) fleet.Verdict {
	t.Helper()
	deadline := time.Now().Add(wakeWait)
	var lastErr error
	needWake := true
	for {
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("no wake with the verdict within %v (last read error: %v)", wakeWait, lastErr)
		}
		if needWake && !woke(x, left) {
			continue
		}
		ch, err := x.Read(context.Background(), "b", seq, 0)
		if err != nil {
			// Read again soon: the wake that brought us here is spent.
			lastErr, needWake = err, false
			time.Sleep(50 * time.Millisecond)
			continue
		}
		needWake = true
		for _, v := range ch.Verdicts {
			if ok(v) {
				return v
			}
		}
		seq = ch.Seq
	}
}

// TestFleetExchangePropagation measures how long a hold raised on one
// replica takes to reach another: from a's RaiseRegisters returning to b's
// Wake and Read seeing it.
func TestFleetExchangePropagation(t *testing.T) {
	t.Parallel()
	url := journaltest.DatabaseURL(t)
	a, b := openExchange(t, url), openExchange(t, url)
	const n = 200
	lat := make([]time.Duration, 0, n)
	var seq int64
	for i := range n {
		hold := t0.Add(time.Duration(i+1) * time.Second)
		raise(t, a, fleet.Verdict{Key: rlKey, HoldUntil: hold, HoldSpan: time.Second})
		returned := time.Now()
		deadline := returned.Add(5 * time.Second)
	wait:
		for {
			if !woke(b, time.Until(deadline)) {
				t.Fatalf("hold %d: b not woken within 5s", i)
			}
			ch := read(t, b, "b", seq, 0)
			seq = ch.Seq
			for _, v := range ch.Verdicts {
				if v.HoldUntil.Equal(hold) {
					lat = append(lat, time.Since(returned))
					break wait
				}
			}
		}
	}
	slices.Sort(lat)
	p50, p99 := lat[n/2], lat[n*99/100]
	t.Logf("propagation of %d holds from a to b: p50 %v, p99 %v, max %v", n, p50, p99, lat[n-1])
	if p99 >= time.Second {
		t.Fatalf("p99 %v, want under 1s", p99)
	}
}

// TestFleetExchangeSweep: Sweep deletes the verdicts that ended and went
// idle, and the counts of replicas gone quiet.
func TestFleetExchangeSweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := journaltest.DatabaseURL(t)
	x := openExchange(t, url)
	ended := fleet.Key{Scope: fleet.ScopeRateLimit, Tenant: "acme", Provider: "openai", Model: "m", KeyID: "ended"}
	stopped := fleet.Key{Scope: fleet.ScopeAuth, Tenant: "acme", Provider: "openai", KeyID: "stopped"}
	closed := fleet.Key{Scope: fleet.ScopeAvailability, Tenant: "acme", Provider: "openai", Model: "closed"}
	raise(t, x,
		fleet.Verdict{Key: ended, HoldUntil: t0.Add(time.Second)},
		fleet.Verdict{Key: rlKey, HoldUntil: t0.Add(2 * time.Hour)},
		fleet.Verdict{Key: stopped, StopUntil: t0.Add(2 * time.Hour), StopWhy: "revoked"})
	for _, m := range []struct {
		key   fleet.Key
		state fleet.BreakerState
		base  int64
	}{{avKey, fleet.Open, 0}, {closed, fleet.Open, 0}, {closed, fleet.Closed, 1}} {
		if _, won, err := x.MoveBreaker(ctx, fleet.Verdict{Key: m.key, Breaker: m.state}, m.base); err != nil || !won {
			t.Fatalf("MoveBreaker: won %v, %v", won, err)
		}
	}
	for i, at := range []time.Time{t0, t0.Add(50 * time.Minute)} {
		if err := x.PublishCounts(ctx, fleet.ReplicaCounts{Replica: fmt.Sprint("r", i), At: at}); err != nil {
			t.Fatal(err)
		}
	}
	sweep := func(now time.Time, idle time.Duration) int64 {
		t.Helper()
		n, err := x.Sweep(ctx, now, idle)
		if err != nil {
			t.Fatalf("Sweep: %v", err)
		}
		return n
	}
	// Nothing has been idle for an hour: not the verdicts (updated_at is
	// PostgreSQL's clock), not the replicas (at is the fleet's).
	if n := sweep(t0.Add(time.Minute), time.Hour); n != 0 {
		t.Fatalf("Sweep deleted %d rows, want 0", n)
	}
	// The verdicts changed two hours ago: the ended hold and the closed
	// breaker go, the hold and stop that last and the open breaker stay;
	// the replica quiet since t0 goes.
	journaltest.Query(t, url, `UPDATE fleet_state SET updated_at = updated_at - interval '2 hours'`)
	if n := sweep(t0.Add(time.Hour), 30*time.Minute); n != 3 {
		t.Fatalf("Sweep deleted %d rows, want 3", n)
	}
	ch := read(t, x, "x", 0, 0)
	var keys []fleet.Key
	for _, v := range ch.Verdicts {
		keys = append(keys, v.Key)
	}
	if len(keys) != 3 || !slices.Contains(keys, rlKey) || !slices.Contains(keys, stopped) || !slices.Contains(keys, avKey) {
		t.Fatalf("after the sweep: %v, want rlKey, stopped, avKey", keys)
	}
	if len(ch.Counts) != 1 || ch.Counts[0].Replica != "r1" {
		t.Fatalf("after the sweep: counts %+v, want r1's", ch.Counts)
	}
}

func TestOpenFleetExchangeUnreachable(t *testing.T) {
	t.Parallel()
	start := time.Now()
	_, err := journal.OpenFleetExchange(context.Background(), "postgres://postgres@127.0.0.1:1/x?sslmode=disable",
		journal.WithExchangeLogger(quiet))
	wantErr(t, err, journal.ErrUnavailable)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("OpenFleetExchange took %v to fail", d)
	}
	_, err = journal.OpenFleetExchange(context.Background(), "postgres://%zz")
	wantField(t, err, "database_url")

	// A closed exchange answers ErrUnavailable.
	x := openExchange(t, journaltest.DatabaseURL(t))
	x.Close()
	x.Close()
	_, err = x.Read(context.Background(), "x", 0, 0)
	wantErr(t, err, journal.ErrUnavailable)
}
