package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/journal/journaltest"
)

// Replica tests: three real `policyd serve` processes on 127.0.0.1 sharing
// one PostgreSQL database (--fleet-store postgres), and a client that sends
// each call to the next replica in turn, as a per-call load balancer does.
// What one replica learns (a breaker's failures, a Retry-After) must reach
// the others within about a second. Each test waits by polling with
// generous limits, so a slow machine makes it longer, not flaky; the
// propagation times measured are logged.

// replicaIDs are the --replica-id of the three replicas, in order.
var replicaIDs = []string{"r1", "r2", "r3"}

// replica is one running replica and its clients.
type replica struct {
	id     string
	d      *daemon
	policy policydv1.PolicyServiceClient
	fleet  policydv1.FleetServiceClient
	health healthpb.HealthClient
}

// startReplicas starts the three replicas on the database at url.
func startReplicas(t *testing.T, ctx context.Context, url string) []*replica {
	t.Helper()
	rs := make([]*replica, len(replicaIDs))
	for i, id := range replicaIDs {
		d := startDaemon(t, ctx, "--database-url", url, "--fleet-store", "postgres", "--replica-id", id)
		conn := d.conn(t)
		rs[i] = &replica{id: id, d: d, policy: policydv1.NewPolicyServiceClient(conn),
			fleet: policydv1.NewFleetServiceClient(conn), health: healthpb.NewHealthClient(conn)}
	}
	return rs
}

// roundRobin sends each call to the next replica in turn, over one
// connection per replica.
type roundRobin struct {
	replicas []*replica
	next     atomic.Uint64
}

// NextDelay asks the next replica, and says which one answered.
func (rr *roundRobin) NextDelay(ctx context.Context, req *policydv1.NextDelayRequest) (*policydv1.NextDelayResponse, *replica, error) {
	r := rr.replicas[(rr.next.Add(1)-1)%uint64(len(rr.replicas))]
	resp, err := r.policy.NextDelay(ctx, req)
	return resp, r, err
}

// logsOf is every replica's log, for a failure message.
func logsOf(rs []*replica) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "--- %s ---\n%s", r.id, r.d.logs.String())
	}
	return b.String()
}

// An OpenAI overload, as the provider answers it: OVERLOADED, a failure the
// availability breaker counts.
const openAIOverloaded = `{"error":{"message":"The server is overloaded or not ready yet.","type":"server_error","param":null,"code":null}}`

// An OpenAI rate limit: RATE_LIMIT (not QUOTA_EXHAUSTED, which would stop the key).
const openAIRateLimited = `{"error":{"message":"Rate limit reached for gpt-4o-mini in organization org-x on requests per min (RPM). Please try again later.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`

// TestReplicasBreakerE2E: 30 overloads of openai/gpt-4o from 5 clients,
// round-robin over three replicas (10 each, under the breaker's volume of
// 20), open the availability breaker on every replica, and exactly one
// replica journals the transition.
func TestReplicasBreakerE2E(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	url := journaltest.DatabaseURL(t)
	rs := startReplicas(t, ctx, url)
	rr := &roundRobin{replicas: rs}

	const (
		calls   = 30
		clients = 5 // coprime with 3: every replica sees every client
		bucket  = "availability:openai/gpt-4o"
	)
	perReplica := map[string]int{}
	perReplicaClients := map[string]map[string]bool{}
	for i := range calls {
		client := fmt.Sprintf("agent-%d", i%clients)
		resp, r, err := rr.NextDelay(ctx, &policydv1.NextDelayRequest{
			Attempt:  1,
			ClientId: client,
			Failure: &policydv1.Failure{Provider: "openai", Model: "gpt-4o", KeyId: "k-breaker", Operation: "chat",
				Method: "POST", HttpStatus: 503, Body: openAIOverloaded},
		})
		if err != nil {
			t.Fatalf("NextDelay #%d on %s: %v", i, r.id, err)
		}
		if got := resp.GetDecision().GetClassification().GetFailureType(); got != policydv1.FailureType_FAILURE_TYPE_OVERLOADED {
			t.Fatalf("NextDelay #%d on %s: failure type %v, want OVERLOADED (a failure the breaker counts)", i, r.id, got)
		}
		perReplica[r.id]++
		if perReplicaClients[r.id] == nil {
			perReplicaClients[r.id] = map[string]bool{}
		}
		perReplicaClients[r.id][client] = true
	}
	sent := time.Now()
	for _, r := range rs {
		if n := perReplica[r.id]; n == 0 || n >= 20 {
			t.Fatalf("replica %s got %d of the %d failures; want each replica under the breaker's volume of 20 (%v)", r.id, n, calls, perReplica)
		}
	}
	t.Logf("failures per replica %v, distinct clients per replica: r1 %d, r2 %d, r3 %d", perReplica,
		len(perReplicaClients["r1"]), len(perReplicaClients["r2"]), len(perReplicaClients["r3"]))

	// Every replica reports the breaker open (it stays open 5 s, so each
	// replica is checked until it has been seen open once).
	openAt := map[string]time.Duration{}
	last := map[string]string{}
	if !within(15*time.Second, func() bool {
		for _, r := range rs {
			if _, ok := openAt[r.id]; ok {
				continue
			}
			resp, err := r.fleet.GetBucket(ctx, &policydv1.GetBucketRequest{Bucket: bucket})
			if err != nil {
				last[r.id] = err.Error()
				continue
			}
			b := resp.GetBucket()
			last[r.id] = fmt.Sprintf("breaker %v, %d failures from %d clients in the window, reason %q",
				b.GetState().GetBreaker(), b.GetWindowFailures(), b.GetWindowClients(), b.GetState().GetReason())
			if b.GetState().GetBreaker() == policydv1.BreakerState_BREAKER_STATE_OPEN {
				openAt[r.id] = time.Since(sent)
				t.Logf("%s: breaker open %v after the last failure: %s", r.id, openAt[r.id].Round(time.Millisecond), last[r.id])
			}
		}
		return len(openAt) == len(rs)
	}) {
		t.Fatalf("after 15 s, the replicas that saw the breaker of %s open: %v; last seen: %v\n%s", bucket, openAt, last, logsOf(rs))
	}
	// Counts go out about once a second: a few seconds is plenty.
	for id, after := range openAt {
		if after > 5*time.Second {
			t.Errorf("%s: breaker open only %v after the last failure, want within 5 s", id, after.Round(time.Millisecond))
		}
	}

	// Decision.fleet on a further NextDelay shows it too, on every replica.
	// The failure is one the breaker does not count (a rate limit on the
	// same model), so that it cannot re-open the breaker once half-open.
	for _, r := range rs {
		resp, err := r.policy.NextDelay(ctx, &policydv1.NextDelayRequest{Attempt: 1, ClientId: "agent-check",
			Failure: &policydv1.Failure{Provider: "openai", Model: "gpt-4o", KeyId: "k-breaker", Operation: "chat", Method: "POST",
				HttpStatus: 429, Body: openAIRateLimited}})
		if err != nil {
			t.Fatalf("NextDelay on %s: %v", r.id, err)
		}
		fs := resp.GetDecision().GetFleet()
		// Open, or half-open if the 5-s open period already ran out on a slow machine.
		if fs.GetBucket() != bucket || fs.GetBreaker() == policydv1.BreakerState_BREAKER_STATE_CLOSED {
			t.Errorf("%s: Decision.fleet = %v, want bucket %s with its breaker open", r.id, fs, bucket)
		}
		t.Logf("%s: decision %v %v, fleet: %v", r.id, resp.GetDecision().GetAction(), resp.GetDecision().GetStopReason(), fs)
	}

	// The journal: exactly one breaker_open for the bucket, whichever
	// replica won the transition. The events are journaled in the
	// background, so wait for the first, then give a second one time to
	// show up: until every replica has seen the breaker move on (half-open
	// after its 5-s open period), by which time each has settled its own
	// proposal of the open transition.
	query := `SELECT replica, client_id, reason, counts::text FROM fleet_events
		WHERE event = 'breaker_open' AND bucket = $1 AND scope = 'availability' AND provider = 'openai' AND model = 'gpt-4o'
		ORDER BY id`
	var rows [][]string
	waitFor(t, 15*time.Second, "a breaker_open row in fleet_events", func() bool {
		_, rows = journaltest.Query(t, url, query, bucket)
		return len(rows) > 0
	})
	waitFor(t, 30*time.Second, "every replica sees the breaker leave the open state", func() bool {
		for _, r := range rs {
			resp, err := r.fleet.GetBucket(ctx, &policydv1.GetBucketRequest{Bucket: bucket})
			if err != nil || resp.GetBucket().GetState().GetBreaker() == policydv1.BreakerState_BREAKER_STATE_OPEN {
				return false
			}
		}
		return true
	})
	_, rows = journaltest.Query(t, url, query, bucket)
	if len(rows) != 1 {
		t.Errorf("fleet_events has %d breaker_open rows for %s, want exactly 1: %v", len(rows), bucket, rows)
	} else {
		t.Logf("breaker_open journaled once: replica %q, client %q, reason %q, counts %s", rows[0][0], rows[0][1], rows[0][2], rows[0][3])
	}
	// The replica that won the transition is the only one that logs it
	// ("fleet breaker_open"): a loser drops its own events.
	var winners []string
	for _, r := range rs {
		if hasExactRecord(r.d, "fleet breaker_open", "bucket", bucket) {
			winners = append(winners, r.id)
		}
	}
	if len(winners) != 1 {
		t.Errorf("replicas that logged \"fleet breaker_open\" for %s: %v, want exactly one", bucket, winners)
	} else {
		t.Logf("the open transition was won by %s", winners[0])
		if len(rows) == 1 && rows[0][0] != winners[0] {
			t.Errorf("fleet_events.replica is %q, want the replica that journaled it, %q", rows[0][0], winners[0])
		}
	}

	// The rest of the cycle, with no further failure: half-open after the
	// open period, closed 3 s later; each transition journaled once too.
	waitFor(t, 30*time.Second, "a breaker_close row in fleet_events", func() bool {
		_, rows = journaltest.Query(t, url, `SELECT 1 FROM fleet_events WHERE bucket = $1 AND event = 'breaker_close'`, bucket)
		return len(rows) > 0
	})
	waitFor(t, 15*time.Second, "every replica reports the breaker closed", func() bool {
		for _, r := range rs {
			resp, err := r.fleet.GetBucket(ctx, &policydv1.GetBucketRequest{Bucket: bucket})
			if err != nil || resp.GetBucket().GetState().GetBreaker() != policydv1.BreakerState_BREAKER_STATE_CLOSED {
				return false
			}
		}
		return true
	})
	_, all := journaltest.Query(t, url, `SELECT event, count(*)::int FROM fleet_events WHERE bucket = $1 GROUP BY event ORDER BY event`, bucket)
	counts := map[string]string{}
	for _, row := range all {
		counts[row[0]] = row[1]
	}
	t.Logf("fleet_events for %s by event: %v", bucket, counts)
	for _, ev := range []string{"breaker_open", "breaker_half_open", "breaker_close"} {
		if counts[ev] != "1" {
			t.Errorf("fleet_events has %q %s rows for %s, want exactly 1 (all: %v)", counts[ev], ev, bucket, counts)
		}
	}
}

// within polls cond every 10 ms until it holds (true) or limit passes (false).
func within(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// TestReplicasHoldE2E: a 429 with Retry-After: 30 answered by r1 holds its
// bucket on r2 and r3 within a second: a 429 without a hint there waits out
// the shared cooldown.
func TestReplicasHoldE2E(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	url := journaltest.DatabaseURL(t)
	rs := startReplicas(t, ctx, url)
	const bucket = "rate_limit:openai/gpt-4o-mini@k-hold"
	failure := func(headers map[string]string) *policydv1.Failure {
		return &policydv1.Failure{Provider: "openai", Model: "gpt-4o-mini", KeyId: "k-hold", Operation: "chat", Method: "POST",
			HttpStatus: 429, Headers: headers, Body: openAIRateLimited}
	}

	resp, err := rs[0].policy.NextDelay(ctx, &policydv1.NextDelayRequest{Attempt: 1, ClientId: "agent-hold-r1",
		Failure: failure(map[string]string{"retry-after": "30"})})
	if err != nil {
		t.Fatalf("NextDelay on r1: %v", err)
	}
	set := time.Now()
	d := resp.GetDecision()
	if d.GetAction() != policydv1.Action_ACTION_RETRY || d.GetClassification().GetFailureType() != policydv1.FailureType_FAILURE_TYPE_RATE_LIMIT ||
		d.GetDelay().AsDuration() < 30*time.Second {
		t.Fatalf("r1: %v %v after %v, want a RATE_LIMIT retry after at least the 30-s hint", d.GetAction(), d.GetClassification().GetFailureType(), d.GetDelay().AsDuration())
	}
	if fs := d.GetFleet(); fs.GetBucket() != bucket || fs.GetHoldRemaining().AsDuration() < 29*time.Second {
		t.Fatalf("r1: Decision.fleet = %v, want bucket %s holding about 30 s", fs, bucket)
	}
	t.Logf("r1: retry after %v, fleet: %v", d.GetDelay().AsDuration().Round(time.Millisecond), d.GetFleet())

	// Poll r2 and r3 at once with a 429 without a hint, each until its
	// answer shows the shared hold.
	type seen struct {
		after time.Duration
		polls int
		d     *policydv1.Decision
		err   error
	}
	got := make([]seen, len(rs))
	var wg sync.WaitGroup
	for i, r := range rs[1:] {
		wg.Go(func() {
			s := &got[i+1]
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) && ctx.Err() == nil {
				s.polls++
				resp, err := r.policy.NextDelay(ctx, &policydv1.NextDelayRequest{Attempt: 1, ClientId: "agent-hold-" + r.id, Failure: failure(nil)})
				if err != nil {
					s.err = err
					return
				}
				s.d = resp.GetDecision()
				if s.d.GetFleet().GetHoldRemaining().AsDuration() > 0 {
					s.after = time.Since(set)
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
			s.err = fmt.Errorf("no shared hold after %d polls over 10 s; last decision %v", s.polls, s.d)
		})
	}
	wg.Wait()
	for i, r := range rs[1:] {
		s := got[i+1]
		if s.err != nil {
			t.Errorf("%s: %v", r.id, s.err)
			continue
		}
		d := s.d
		t.Logf("%s: shared hold seen %v after r1 answered (%d polls): %v retry after %v, fleet: %v",
			r.id, s.after.Round(time.Millisecond), s.polls, d.GetAction(), d.GetDelay().AsDuration().Round(time.Millisecond), d.GetFleet())
		if s.after > time.Second {
			t.Errorf("%s: the hold took %v to arrive, want within 1 s", r.id, s.after.Round(time.Millisecond))
		}
		if d.GetAction() != policydv1.Action_ACTION_RETRY || d.GetDelay().AsDuration() < 29*time.Second {
			t.Errorf("%s: %v after %v, want a retry after at least 29 s (the 30-s hold, shared)", r.id, d.GetAction(), d.GetDelay().AsDuration())
		}
		fs := d.GetFleet()
		if fs.GetBucket() != bucket || !fs.GetChanged() || fs.GetHoldRemaining().AsDuration() < 28*time.Second ||
			!strings.Contains(fs.GetReason(), "shared cooldown") {
			t.Errorf("%s: Decision.fleet = %v, want bucket %s changed by a shared cooldown of about 30 s", r.id, fs, bucket)
		}
	}
	if t.Failed() {
		t.Log(logsOf(rs))
	}
}

// TestReplicasHealthAndLogsE2E: each replica says it shares the fleet
// through PostgreSQL, under its own id, reaches the database (its counts
// row is there) and reports policyd.fleet.sync SERVING.
func TestReplicasHealthAndLogsE2E(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	url := journaltest.DatabaseURL(t)
	rs := startReplicas(t, ctx, url)

	for _, r := range rs {
		if !hasExactRecord(r.d, "fleet shared through PostgreSQL", "replica", r.id) {
			t.Errorf("%s did not log \"fleet shared through PostgreSQL\" with replica %q:\n%s", r.id, r.id, r.d.logs.String())
		}
	}
	// Every replica has been through a sync round: its counts row is in the
	// exchange's table.
	var rows [][]string
	waitFor(t, 15*time.Second, "a fleet_replicas row for each replica", func() bool {
		_, rows = journaltest.Query(t, url, `SELECT replica FROM fleet_replicas ORDER BY replica`)
		return len(rows) == len(rs)
	})
	for i, r := range rs {
		if rows[i][0] != r.id {
			t.Errorf("fleet_replicas rows %v, want %v", rows, replicaIDs)
			break
		}
	}
	for _, r := range rs {
		var st healthpb.HealthCheckResponse_ServingStatus
		waitFor(t, 15*time.Second, r.id+": policyd.fleet.sync SERVING", func() bool {
			resp, err := r.health.Check(ctx, &healthpb.HealthCheckRequest{Service: "policyd.fleet.sync"})
			st = resp.GetStatus()
			return status.Code(err) == codes.OK && st == healthpb.HealthCheckResponse_SERVING
		})
		t.Logf("%s: policyd.fleet.sync %v", r.id, st)
	}
}

// hasExactRecord reports whether d logged a JSON record with message msg
// and the string value at key exactly value.
func hasExactRecord(d *daemon, msg, key, value string) bool {
	for line := range strings.Lines(d.logs.String()) {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		if rec["msg"] == msg && rec[key] == value {
			return true
		}
	}
	return false
}
