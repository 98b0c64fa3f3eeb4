package pgexchange_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/policyd/policyd/internal/dberr"
	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/fleet/fleettest"
	"github.com/policyd/policyd/internal/fleet/pgexchange"
	"github.com/policyd/policyd/internal/journal/journaltest"
)

var (
	rlKey = fleet.Key{Scope: fleet.ScopeRateLimit, Tenant: "acme", Provider: "openai", Model: "gpt-4o", KeyID: "key-a"}
	avKey = fleet.Key{Scope: fleet.ScopeAvailability, Tenant: "acme", Provider: "openai", Model: "gpt-4o"}
)

func TestMain(m *testing.M) { journaltest.Main(m) }

// t0 is the start of every test's fixed clock.
var t0 = fleettest.T0

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestExchangeContract runs the fleet.Exchange contract on PostgreSQL, a
// fresh database per subtest.
func TestExchangeContract(t *testing.T) {
	t.Parallel()
	fleettest.ExerciseExchange(t, func(t *testing.T) fleettest.Open {
		url := journaltest.DatabaseURL(t)
		return func(t testing.TB) fleet.Exchange { return openExchange(t, url) }
	})
}

// TestClaimProbeStoresReplica: the probe slot's claim is a row's columns,
// naming the replica that holds it.
func TestClaimProbeStoresReplica(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := journaltest.DatabaseURL(t)
	x := openExchange(t, url)
	for i, state := range []fleet.BreakerState{fleet.Open, fleet.HalfOpen} {
		if _, won, err := x.MoveBreaker(ctx, fleet.Verdict{Key: avKey, Breaker: state}, int64(i)); err != nil || !won {
			t.Fatalf("MoveBreaker to %v: won %v, %v", state, won, err)
		}
	}
	if ok, err := x.ClaimProbe(ctx, avKey, 2, t0, time.Second, "replica-7"); err != nil || !ok {
		t.Fatalf("ClaimProbe: %v, %v", ok, err)
	}
	_, rows := journaltest.Query(t, url, `SELECT probe_replica FROM fleet_state WHERE scope = 'availability'`)
	if len(rows) != 1 || rows[0][0] != "replica-7" {
		t.Fatalf("probe slot: %v", rows)
	}
}

func raise(t testing.TB, x *pgexchange.Exchange, vs ...fleet.Verdict) {
	t.Helper()
	if err := x.RaiseRegisters(context.Background(), vs); err != nil {
		t.Fatalf("RaiseRegisters: %v", err)
	}
}

func read(t testing.TB, x *pgexchange.Exchange, replica string, seq, countsSeq int64) fleet.Changes {
	t.Helper()
	ch, err := x.Read(context.Background(), replica, seq, countsSeq)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	return ch
}

// wantErr fails t unless err matches want.
func wantErr(t testing.TB, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("error = %v, want %v", err, want)
	}
}

// wakeWait bounds every wait for a Wake: generous, since a notification
// normally arrives within milliseconds.
const wakeWait = 20 * time.Second

// openExchange opens an exchange on url, closed when t ends, and waits
// until its listener listens (its first Wake).
func openExchange(t testing.TB, url string) *pgexchange.Exchange {
	t.Helper()
	x, err := pgexchange.Open(context.Background(), url, pgexchange.WithLogger(quiet))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(x.Close)
	if !fleettest.Woke(x, wakeWait) {
		t.Fatal("the listener did not connect (no first Wake)")
	}
	return x
}

func drainWake(x *pgexchange.Exchange) {
	select {
	case <-x.Wake():
	default:
	}
}

// TestExchangeIdle: the listener's idle waits end in pings that keep
// its connection usable; notifications still arrive after many of them.
func TestExchangeIdle(t *testing.T) {
	t.Parallel()
	url := journaltest.DatabaseURL(t)
	a := openExchange(t, url)
	b, err := pgexchange.Open(context.Background(), url, pgexchange.WithLogger(quiet),
		pgexchange.WithPingInterval(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if !fleettest.Woke(b, wakeWait) {
		t.Fatal("the listener did not connect")
	}
	for i := range 5 {
		// About 20 idle waits and pings; a wake here would be a reconnection.
		if fleettest.Woke(b, 200*time.Millisecond) {
			t.Fatalf("round %d: b woken while idle (its listener reconnected?)", i)
		}
		raise(t, a, fleet.Verdict{Key: rlKey, HoldUntil: t0.Add(time.Duration(i+1) * time.Second)})
		if !fleettest.Woke(b, wakeWait) {
			t.Fatalf("round %d: b not woken after idling", i)
		}
	}
}

// TestExchangeOutage stops PostgreSQL under two replicas' exchanges:
// calls fail with an error within their context; after the restart the
// listeners reconnect by themselves, and a change made while b's listener
// was away reaches b (its reconnection wakes it).
func TestExchangeOutage(t *testing.T) {
	t.Parallel()
	srv := journaltest.NewServer(t) // our own cluster: stopping it disturbs no other test
	url := srv.DatabaseURL(t)
	a, b := openExchange(t, url), openExchange(t, url)
	raise(t, a, fleet.Verdict{Key: rlKey, HoldUntil: t0.Add(time.Second), HoldSpan: time.Second})
	if !fleettest.Woke(b, wakeWait) {
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
		if !errors.Is(err, dberr.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
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
	if fleettest.Woke(b, 0) {
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
	fleettest.WantVerdict(t, got, hold)

	// b's listener listens again: a's next change wakes it.
	drainWake(b)
	raise(t, a, fleet.Verdict{Key: avKey, HoldUntil: t0.Add(time.Hour)})
	if !fleettest.Woke(b, wakeWait) {
		t.Fatal("b not woken by a change after the restart")
	}
	if ch := read(t, b, "b", 0, 0); len(ch.Verdicts) != 2 {
		t.Fatalf("b reads %+v after the restart", ch)
	}
}

// awaitVerdict waits for x's Wake and reads (tolerating errors: the
// database may just be back) until a verdict newer than seq satisfies ok,
// and returns it.
func awaitVerdict(t testing.TB, x *pgexchange.Exchange, seq int64, ok func(fleet.Verdict) bool) fleet.Verdict {
	t.Helper()
	deadline := time.Now().Add(wakeWait)
	var lastErr error
	needWake := true
	for {
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("no wake with the verdict within %v (last read error: %v)", wakeWait, lastErr)
		}
		if needWake && !fleettest.Woke(x, left) {
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

// TestExchangePropagation measures how long a hold raised on one
// replica takes to reach another: from a's RaiseRegisters returning to b's
// Wake and Read seeing it.
func TestExchangePropagation(t *testing.T) {
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
			if !fleettest.Woke(b, time.Until(deadline)) {
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

// TestExchangeSweep: Sweep deletes the verdicts that ended and went
// idle, and the counts of replicas gone quiet.
func TestExchangeSweep(t *testing.T) {
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

func TestOpenUnreachable(t *testing.T) {
	t.Parallel()
	start := time.Now()
	_, err := pgexchange.Open(context.Background(), "postgres://postgres@127.0.0.1:1/x?sslmode=disable",
		pgexchange.WithLogger(quiet))
	wantErr(t, err, dberr.ErrUnavailable)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Open took %v to fail", d)
	}
	_, err = pgexchange.Open(context.Background(), "postgres://%zz")
	fleettest.WantField(t, err, "database_url")

	// A closed exchange answers ErrUnavailable.
	x := openExchange(t, journaltest.DatabaseURL(t))
	x.Close()
	x.Close()
	_, err = x.Read(context.Background(), "x", 0, 0)
	wantErr(t, err, dberr.ErrUnavailable)
}
