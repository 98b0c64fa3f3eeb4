package main

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/journal/journaltest"
)

// Fault tests: the real binary on a real PostgreSQL, under concurrent
// journaled load, killed, stopped, or with its database stopped. Each waits
// for a number of acknowledged attempts rather than a fixed time, so that a
// slow machine makes them longer, not flaky.

// faultWorkers is the number of concurrent clients of a fault test's load.
const faultWorkers = 50

// attemptKey names one journaled attempt: its context and number.
type attemptKey struct {
	contextID string
	attempt   int32
}

// loadCall is one call of a journalLoad and how it ended.
type loadCall struct {
	key        attemptKey
	rpc        string // "NextDelay" or "RecordAttempt"
	code       codes.Code
	acked      bool // NextDelay answered journaled=true, or RecordAttempt answered OK
	start, end time.Time
}

// journalLoad drives journaled calls at a daemon from faultWorkers
// goroutines: even workers ask NextDelay with a context_id, odd ones call
// RecordAttempt, each in contexts of its own (a new one every 5 attempts),
// so every call names a distinct attempt. It keeps every call's outcome.
type journalLoad struct {
	acks      atomic.Int64
	halt      atomic.Bool // set: workers stop after their next failed call
	stop      atomic.Bool // set: workers stop now
	wg        sync.WaitGroup
	perWorker [][]loadCall
}

// startJournalLoad starts the load on d; wait stops it and returns the calls.
func startJournalLoad(t *testing.T, ctx context.Context, d *daemon) *journalLoad {
	t.Helper()
	conn := d.conn(t)
	pc, jc := policydv1.NewPolicyServiceClient(conn), policydv1.NewJournalServiceClient(conn)
	failure := &policydv1.Failure{Provider: "openai", Operation: "chat", HttpStatus: 503}
	l := &journalLoad{perWorker: make([][]loadCall, faultWorkers)}
	for w := range faultWorkers {
		l.wg.Go(func() {
			var id string
			for seq := 0; !l.stop.Load() && ctx.Err() == nil; seq++ {
				if seq%5 == 0 {
					id = uuid.NewString()
				}
				c := loadCall{key: attemptKey{id, int32(seq%5 + 1)}, start: time.Now()}
				callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
				var err error
				if w%2 == 0 {
					c.rpc = "NextDelay"
					var resp *policydv1.NextDelayResponse
					resp, err = pc.NextDelay(callCtx, &policydv1.NextDelayRequest{ContextId: id, Attempt: c.key.attempt, Failure: failure})
					c.acked = err == nil && resp.GetDecision().GetJournaled()
				} else {
					c.rpc = "RecordAttempt"
					_, err = jc.RecordAttempt(callCtx, &policydv1.RecordAttemptRequest{ContextId: id, Attempt: c.key.attempt, Failure: failure})
					c.acked = err == nil
				}
				cancel()
				c.end, c.code = time.Now(), status.Code(err)
				l.perWorker[w] = append(l.perWorker[w], c)
				if c.acked {
					l.acks.Add(1)
				}
				if err != nil {
					if l.halt.Load() {
						return
					}
					time.Sleep(20 * time.Millisecond) // like a client backing off
				}
			}
		})
	}
	return l
}

// waitAcks waits until the load has n acknowledged attempts.
func (l *journalLoad) waitAcks(t *testing.T, n int64, d *daemon) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for l.acks.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d acknowledged attempts after 30s, want %d\n%s", l.acks.Load(), n, d.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// wait stops the load and returns every call it made.
func (l *journalLoad) wait() []loadCall {
	l.stop.Store(true)
	l.wg.Wait()
	var all []loadCall
	for _, calls := range l.perWorker {
		all = append(all, calls...)
	}
	return all
}

// journalRows returns every attempt in the database at url.
func journalRows(t *testing.T, url string) map[attemptKey]bool {
	t.Helper()
	_, rows := journaltest.Query(t, url, `SELECT context_id::text, attempt FROM retry_attempts`)
	got := make(map[attemptKey]bool, len(rows))
	for _, r := range rows {
		n, err := strconv.Atoi(r[1])
		if err != nil {
			t.Fatalf("attempt %q: %v", r[1], err)
		}
		got[attemptKey{r[0], int32(n)}] = true
	}
	return got
}

// ackTally compares the calls of a load with the rows in the journal.
type ackTally struct {
	calls, acked, rows int
	missing            []attemptKey // acknowledged, but not in the journal
	failedButWritten   []attemptKey // the call failed, yet its row was committed: an answer lost
	unacked            []attemptKey // not acknowledged (failed, or journaled=false)
	unackedWritten     int          // of unacked, how many have their row anyway
}

func tallyAcks(calls []loadCall, rows map[attemptKey]bool) ackTally {
	tl := ackTally{calls: len(calls), rows: len(rows)}
	for _, c := range calls {
		switch {
		case c.acked:
			tl.acked++
			if !rows[c.key] {
				tl.missing = append(tl.missing, c.key)
			}
		default:
			tl.unacked = append(tl.unacked, c.key)
			if rows[c.key] {
				tl.unackedWritten++
			}
			if c.code != codes.OK && rows[c.key] {
				tl.failedButWritten = append(tl.failedButWritten, c.key)
			}
		}
	}
	return tl
}

// checkCodes fails t for a call that ended with a code other than OK or
// allowed: the load's requests are valid, so anything else is a bug.
func checkCodes(t *testing.T, calls []loadCall, allowed ...codes.Code) {
	t.Helper()
	bad := map[codes.Code]int{}
	for _, c := range calls {
		ok := c.code == codes.OK
		for _, a := range allowed {
			ok = ok || c.code == a
		}
		if !ok {
			bad[c.code]++
		}
	}
	if len(bad) > 0 {
		t.Errorf("calls ended with unexpected codes (count by code): %v; want only OK and %v", bad, allowed)
	}
}

// loadedDaemon starts a daemon on a fresh journal database and puts it
// under a journalLoad until 1000 attempts are acknowledged; the load's
// workers then stop at their next failed call, so the caller can signal the
// daemon.
func loadedDaemon(t *testing.T, ctx context.Context) (url string, d *daemon, load *journalLoad) {
	t.Helper()
	url = journaltest.DatabaseURL(t)
	d = startDaemon(t, ctx, "--database-url", url)
	load = startJournalLoad(t, ctx, d)
	load.waitAcks(t, 1000, d)
	load.halt.Store(true)
	return url, d, load
}

// SIGKILL under concurrent journaled load: every attempt the daemon
// acknowledged (journaled=true, or RecordAttempt OK) is in the database after
// the crash, and after a restart on the same database a client re-records
// the rest idempotently.
func TestSIGKILLUnderLoadKeepsAcknowledgedAttemptsE2E(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	url, d, load := loadedDaemon(t, ctx)
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d.exited
	calls := load.wait()
	checkCodes(t, calls, codes.Unavailable)
	// A COMMIT the daemon sent before it died still completes in its
	// backend, which then finds the connection gone and exits: count the
	// rows once the dead daemon's sessions are all gone.
	waitFor(t, 30*time.Second, "the killed daemon's database sessions end", func() bool {
		_, rows := journaltest.Query(t, url, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
		return rows[0][0] == "0"
	})

	d2 := startDaemon(t, ctx, "--database-url", url)
	rows := journalRows(t, url)
	tl := tallyAcks(calls, rows)
	t.Logf("SIGKILL: %d calls, %d acknowledged, %d rows after the restart, %d acknowledged but missing, %d unacknowledged (%d of them committed anyway)",
		tl.calls, tl.acked, tl.rows, len(tl.missing), len(tl.unacked), tl.unackedWritten)
	if len(tl.missing) > 0 {
		t.Fatalf("%d acknowledged attempts are not in the journal after SIGKILL, e.g. %v", len(tl.missing), tl.missing[0])
	}

	// What a client does after the crash: record again what was not
	// acknowledged. Rows the dead daemon committed are found, the others created.
	jc := policydv1.NewJournalServiceClient(d2.conn(t))
	for _, k := range tl.unacked {
		resp, err := jc.RecordAttempt(ctx, &policydv1.RecordAttemptRequest{ContextId: k.contextID, Attempt: k.attempt,
			Failure: &policydv1.Failure{Provider: "openai", Operation: "chat", HttpStatus: 503}})
		if err != nil {
			t.Fatalf("re-record %v after the restart: %v", k, err)
		}
		if resp.GetCreated() == rows[k] {
			t.Errorf("re-record %v: created=%v, but the row was there before: %v", k, resp.GetCreated(), rows[k])
		}
	}
	if got, want := len(journalRows(t, url)), tl.calls; got != want {
		t.Errorf("after re-recording: %d rows, want one per call (%d)", got, want)
	}
}

// SIGTERM under the same load: the daemon exits 0 within 10s; every
// acknowledged attempt is in the database; calls the daemon had received
// were answered (none failed whose row was committed); calls that arrived
// once it had stopped accepting failed with UNAVAILABLE, which clients retry.
func TestSIGTERMUnderLoadDrainsE2E(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	url, d, load := loadedDaemon(t, ctx)
	signaled := time.Now()
	d.terminate(t, 10*time.Second)
	exitedAfter := time.Since(signaled)
	calls := load.wait()
	checkCodes(t, calls, codes.Unavailable)

	tl := tallyAcks(calls, journalRows(t, url))
	var spanning, refused int
	for _, c := range calls {
		if c.start.Before(signaled) && c.end.After(signaled) && c.code == codes.OK {
			spanning++
		}
		if c.code != codes.OK {
			refused++
		}
	}
	t.Logf("SIGTERM: exit 0 after %v; %d calls, %d acknowledged, %d rows; %d calls in flight at the signal answered, %d refused (UNAVAILABLE)",
		exitedAfter.Round(time.Millisecond), tl.calls, tl.acked, tl.rows, spanning, refused)
	if len(tl.missing) > 0 {
		t.Errorf("%d acknowledged attempts are not in the journal after SIGTERM, e.g. %v", len(tl.missing), tl.missing[0])
	}
	if len(tl.failedButWritten) > 0 {
		t.Errorf("%d calls failed although the daemon committed their attempt (an answer cut off by the stop), e.g. %v",
			len(tl.failedButWritten), tl.failedButWritten[0])
	}
	if spanning == 0 {
		t.Error("no call in flight at SIGTERM was answered: the load did not overlap the stop")
	}
}

// PostgreSQL stopped under load: NextDelay keeps answering (journaled=false)
// within its bound, the journal RPCs answer UNAVAILABLE, and once PostgreSQL
// is back NextDelay journals again, all with the real binary. (The store's
// own detection and recovery are tested in internal/journal/health_test.go;
// the server's mapping in internal/server/journal_server_test.go.)
func TestDatabaseStoppedUnderLoadE2E(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	pg := journaltest.NewServer(t) // our own cluster: stopping it disturbs no other test
	url := pg.DatabaseURL(t)
	const nextDelayBound = 3 * time.Second // --journal-timeout 250ms plus a slow, shared machine
	d := startDaemon(t, ctx, "--database-url", url, "--journal-timeout", "250ms")
	conn := d.conn(t)
	pc, jc := policydv1.NewPolicyServiceClient(conn), policydv1.NewJournalServiceClient(conn)
	probe := func() bool { // a journaled NextDelay of a fresh context: was it journaled?
		resp, err := pc.NextDelay(ctx, &policydv1.NextDelayRequest{ContextId: uuid.NewString(), Attempt: 1,
			Failure: &policydv1.Failure{HttpStatus: 503}})
		if err != nil {
			t.Fatalf("NextDelay probe: %v", err)
		}
		return resp.GetDecision().GetJournaled()
	}
	load := startJournalLoad(t, ctx, d)
	load.waitAcks(t, 200, d)

	stopped := time.Now()
	pg.Stop(t)
	waitFor(t, 10*time.Second, "NextDelay answers journaled=false with PostgreSQL stopped", func() bool { return !probe() })
	down := time.Now()
	time.Sleep(time.Second) // the load runs against a known-down journal
	for _, rpc := range []struct {
		name string
		call func() error
	}{
		{"RecordAttempt", func() error {
			_, err := jc.RecordAttempt(ctx, &policydv1.RecordAttemptRequest{ContextId: uuid.NewString(), Attempt: 1, Failure: &policydv1.Failure{HttpStatus: 503}})
			return err
		}},
		{"BeginContext", func() error { _, err := jc.BeginContext(ctx, &policydv1.BeginContextRequest{}); return err }},
		{"GetContext", func() error {
			_, err := jc.GetContext(ctx, &policydv1.GetContextRequest{ContextId: uuid.NewString()})
			return err
		}},
	} {
		if got := status.Code(rpc.call()); got != codes.Unavailable {
			t.Errorf("%s with PostgreSQL stopped: %v, want Unavailable", rpc.name, got)
		}
	}
	restarted := time.Now()
	pg.Start(t)
	waitFor(t, 20*time.Second, "NextDelay journaled again after PostgreSQL restarted", probe)
	recovered := time.Since(restarted)
	calls := load.wait()
	checkCodes(t, calls, codes.Unavailable)

	var (
		nextDelays, outageNext, outageRecord int
		slowest                              time.Duration
	)
	for _, c := range calls {
		inOutage := c.start.After(down) && c.end.Before(restarted)
		switch c.rpc {
		case "NextDelay":
			nextDelays++
			if c.code != codes.OK {
				t.Errorf("NextDelay %v failed: %v; it must answer whatever the journal's state", c.key, c.code)
			}
			slowest = max(slowest, c.end.Sub(c.start))
			if inOutage {
				outageNext++
				if c.acked {
					t.Errorf("NextDelay %v answered journaled=true with PostgreSQL stopped", c.key)
				}
			}
		case "RecordAttempt":
			if inOutage {
				outageRecord++
				if c.code != codes.Unavailable {
					t.Errorf("RecordAttempt %v with PostgreSQL stopped: %v, want Unavailable", c.key, c.code)
				}
			}
		}
	}
	t.Logf("PostgreSQL stop: detected after %v, journaling again %v after the restart; %d NextDelay calls (%d during the outage), slowest %v; %d RecordAttempt calls during the outage",
		down.Sub(stopped).Round(time.Millisecond), recovered.Round(time.Millisecond), nextDelays, outageNext, slowest.Round(time.Millisecond), outageRecord)
	if slowest > nextDelayBound {
		t.Errorf("slowest NextDelay took %v, want at most %v", slowest, nextDelayBound)
	}
	if outageNext == 0 || outageRecord == 0 {
		t.Errorf("the load made %d NextDelay and %d RecordAttempt calls during the outage; want some of each", outageNext, outageRecord)
	}
	if tl := tallyAcks(calls, journalRows(t, url)); len(tl.missing) > 0 {
		t.Errorf("%d acknowledged attempts are not in the journal, e.g. %v", len(tl.missing), tl.missing[0])
	}
}
