package server

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/fleetevents"
	"github.com/policyd/policyd/internal/journal"
	"github.com/policyd/policyd/internal/journal/journaltest"
	"github.com/policyd/policyd/internal/policy"
)

// incidentServer is a daemon with fleet memory and a journal on one clock
// the test moves, authenticating the tenants acme and beta, with the
// fleet's events journaled at once.
type incidentServer struct {
	clock *atomicClock
	fleet *fleet.Fleet
	addr  string
	store *journal.Store
}

func newIncidentServer(t *testing.T) *incidentServer {
	t.Helper()
	// A minute ago: the incidents view measures open incidents up to the
	// database's now, which this clock must not pass.
	clock := newAtomicClock(time.Now().UTC().Add(-time.Minute).Truncate(time.Second))
	store, err := journal.Open(testContext(t), journaltest.DatabaseURL(t), journal.WithClock(clock.now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	events := store.FleetEventRecorder(journal.WithFleetBatch(1, 5*time.Millisecond))
	t.Cleanup(events.Close) // before the store's
	f := fleet.New(policy.Builtin().Fleet, fleet.WithClock(clock.now),
		fleet.WithSink(fleetevents.Sink(slog.New(slog.DiscardHandler), events, nil, "")))
	ps := NewPolicyServer(policy.Builtin(), WithClock(clock.now), WithRand(fixedRand(0.5)),
		WithJournal(store, 2*time.Second), WithFleet(f))
	addr := serveSecured(t, ps, Security{Auth: tokenAuth(t)})
	return &incidentServer{clock: clock, fleet: f, addr: addr, store: store}
}

// outage makes three of acme's agents fail on openai/gpt-4o with a 503,
// eight times each, every call journaled: the breaker opens.
func (s *incidentServer) outage(t *testing.T) {
	t.Helper()
	ctx := as(testContext(t), tokenAcme)
	agents := newAgents(t, s.addr)
	jc := policydv1.NewJournalServiceClient(dialT(t, s.addr, insecure.NewCredentials()))
	for i := range 24 {
		agent := []string{"agent-a", "agent-b", "agent-c"}[i%3]
		b, err := jc.BeginContext(ctx, &policydv1.BeginContextRequest{Agent: agent, Provider: "openai", Model: "gpt-4o"})
		if err != nil {
			t.Fatal(err)
		}
		d, err := agents.policy(agent).NextDelay(ctx, &policydv1.NextDelayRequest{ContextId: b.GetContext().GetContextId(),
			Attempt: 1, ClientId: agent, Failure: &policydv1.Failure{Provider: "openai", Model: "gpt-4o", HttpStatus: 503,
				Body: `{"error":{"message":"The server is overloaded or not ready yet.","type":"server_error"}}`}})
		if err != nil || !d.GetDecision().GetJournaled() {
			t.Fatalf("NextDelay %d: %v (journaled %v)", i, err, d.GetDecision().GetJournaled())
		}
		s.clock.advance(100 * time.Millisecond)
	}
}

// until asks ListIncidents as acme until ok says the answer is the one
// awaited (the events are journaled in the background).
func (s *incidentServer) until(t *testing.T, req *policydv1.ListIncidentsRequest, ok func([]*policydv1.Incident) bool) []*policydv1.Incident {
	t.Helper()
	fc := policydv1.NewFleetServiceClient(dialT(t, s.addr, insecure.NewCredentials()))
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := fc.ListIncidents(as(testContext(t), tokenAcme), req)
		if err != nil {
			t.Fatalf("ListIncidents: %v", err)
		}
		if ok(resp.GetIncidents()) {
			return resp.GetIncidents()
		}
		if time.Now().After(deadline) {
			t.Fatalf("ListIncidents never gave the incident awaited; last: %v", resp.GetIncidents())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestIncidentsThroughTheServer drives an outage through NextDelay, then its
// recovery on the fleet's clock, and reads it back with ListIncidents and
// GetIncident: open while the breaker is, then recovered, with its first
// failure, its events and its activity; another tenant sees none of it.
func TestIncidentsThroughTheServer(t *testing.T) {
	t.Parallel()
	s := newIncidentServer(t)
	start := s.clock.now()
	s.outage(t)
	// A streaming client's gate reports what it did with first attempts
	// meanwhile: 5 parked, 4 shed, 2 of those sent to the fallback.
	streamCtx, stopStream := context.WithCancel(as(testContext(t), tokenAcme))
	defer stopStream()
	stream, err := policydv1.NewFleetServiceClient(dialT(t, s.addr, insecure.NewCredentials())).Coordinate(streamCtx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&policydv1.CoordinateRequest{ClientId: "gate-1", Usage: []*policydv1.BucketUsage{{
		Target:  &policydv1.BucketTarget{Provider: "openai", Model: "gpt-4o"},
		Elapsed: durationpb.New(time.Second), ParkedNew: 5, Shed: 4, FellBack: 2}}}); err != nil {
		t.Fatal(err)
	}

	open := s.until(t, &policydv1.ListIncidentsRequest{OpenOnly: true}, func(in []*policydv1.Incident) bool {
		return len(in) == 1 && in[0].GetFirstAttemptsParked() > 0
	})[0]
	if open.GetFirstAttemptsParked() != 5 || open.GetFirstAttemptsShed() != 4 || open.GetFirstAttemptsFellBack() != 2 {
		t.Errorf("first attempts parked %d, shed %d, fell back %d; want the gate's 5, 4 and 2",
			open.GetFirstAttemptsParked(), open.GetFirstAttemptsShed(), open.GetFirstAttemptsFellBack())
	}
	if open.GetBucket() != "availability:openai/gpt-4o" || open.GetBreaker() != policydv1.BreakerState_BREAKER_STATE_OPEN ||
		open.GetRecoveredAt() != nil || !open.GetOpen() {
		t.Fatalf("open incident = %v, want the breaker of availability:openai/gpt-4o, open", open)
	}
	ff := open.GetFirstFailure()
	if !ff.GetAt().AsTime().Equal(start) || ff.GetFailureType() != policydv1.FailureType_FAILURE_TYPE_OVERLOADED ||
		ff.GetRule() == "" || ff.GetContextId() == "" || ff.GetAgent() != "agent-a" || ff.GetClientId() == "" {
		t.Errorf("first failure = %v, want the journaled 503 at %v, classified, with its context and the client that opened the breaker", ff, start)
	}

	// The provider is back: the open period ends, the breaker half-opens,
	// and the gate's two probes succeed: it closes.
	s.clock.advance(5 * time.Second)
	s.fleet.Tick()
	if err := stream.Send(&policydv1.CoordinateRequest{Usage: []*policydv1.BucketUsage{{
		Target:  &policydv1.BucketTarget{Provider: "openai", Model: "gpt-4o"},
		Elapsed: durationpb.New(time.Second), Admitted: 2, Succeeded: 2}}}); err != nil {
		t.Fatal(err)
	}
	done := s.until(t, &policydv1.ListIncidentsRequest{}, func(in []*policydv1.Incident) bool {
		return len(in) == 1 && in[0].GetBreaker() == policydv1.BreakerState_BREAKER_STATE_CLOSED
	})[0]
	if done.GetOpen() || done.GetRecoveredAt() == nil || done.GetId() != open.GetId() {
		t.Fatalf("after the close: %v, want incident %d recovered", done, open.GetId())
	}
	// The 20th failure opened it 1.9 s in, for 5 s; the probes' successes
	// closed it half a second later, at the end of the outage's 2.4 s.
	if got, want := done.GetTimeToRecovery().AsDuration(), 7400*time.Millisecond; got != want {
		t.Errorf("time to recovery = %v, want %v: from the first 503 to the close", got, want)
	}
	// The spent budget sent the later retries to a fallback.
	if done.GetFailedAttempts() != 24 || done.GetBreakerOpens() != 1 || done.GetBudgetsExhausted() != 1 ||
		done.GetRetriesStopped()+done.GetRetriesFellBack() == 0 {
		t.Errorf("counts: failed=%d opens=%d budgets=%d stopped=%d fell back=%d, want 24 failures, one opening, one budget spent and retries it turned away",
			done.GetFailedAttempts(), done.GetBreakerOpens(), done.GetBudgetsExhausted(), done.GetRetriesStopped(), done.GetRetriesFellBack())
	}
	if none := s.until(t, &policydv1.ListIncidentsRequest{OpenOnly: true}, func([]*policydv1.Incident) bool { return true }); len(none) != 0 {
		t.Errorf("open incidents after the recovery: %v", none)
	}

	fc := policydv1.NewFleetServiceClient(dialT(t, s.addr, insecure.NewCredentials()))
	got, err := fc.GetIncident(as(testContext(t), tokenAcme), &policydv1.GetIncidentRequest{Id: open.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range got.GetEvents() {
		kinds = append(kinds, e.GetEvent())
	}
	if want := []string{journal.FleetBudgetExhausted, journal.FleetBreakerOpen, journal.FleetShed, journal.FleetBreakerHalfOpen,
		journal.FleetBreakerClose, journal.FleetSlowStart}; strings.Join(kinds, " ") != strings.Join(want, " ") {
		t.Errorf("timeline events = %v, want %v", kinds, want)
	}
	var failed int64
	for _, b := range got.GetActivity() {
		failed += b.GetFailedAttempts()
	}
	if last := got.GetActivity()[len(got.GetActivity())-1]; failed != 24 || last.GetBreaker() != policydv1.BreakerState_BREAKER_STATE_CLOSED {
		t.Errorf("activity: %d failures, ending %v; want 24, ending closed", failed, last.GetBreaker())
	}

	// Another tenant: nothing to list, and acme's incident is not found.
	beta := as(testContext(t), tokenBeta)
	list, err := fc.ListIncidents(beta, &policydv1.ListIncidentsRequest{})
	if err != nil || len(list.GetIncidents()) != 0 {
		t.Errorf("beta's incidents = %v, %v; want none", list.GetIncidents(), err)
	}
	if _, err := fc.GetIncident(beta, &policydv1.GetIncidentRequest{Id: open.GetId()}); status.Code(err) != codes.NotFound {
		t.Errorf("beta's GetIncident of acme's incident: %v, want NotFound", err)
	}
	if _, err := fc.ListIncidents(testContext(t), &policydv1.ListIncidentsRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("ListIncidents without a token: %v, want Unauthenticated", err)
	}
}

func TestIncidentRequestsAreChecked(t *testing.T) {
	t.Parallel()
	s := newIncidentServer(t)
	fc := policydv1.NewFleetServiceClient(dialT(t, s.addr, insecure.NewCredentials()))
	ctx := as(testContext(t), tokenAcme)
	long := strings.Repeat("x", 9000)
	tests := []struct {
		name  string
		call  func() error
		field string
	}{
		{"page size", func() error {
			_, err := fc.ListIncidents(ctx, &policydv1.ListIncidentsRequest{PageSize: 501})
			return err
		}, "page_size"},
		{"page token", func() error {
			_, err := fc.ListIncidents(ctx, &policydv1.ListIncidentsRequest{PageToken: "bm90IGEgdG9rZW4"})
			return err
		}, "page_token"},
		{"provider", func() error {
			_, err := fc.ListIncidents(ctx, &policydv1.ListIncidentsRequest{Provider: long})
			return err
		}, "provider"},
		{"bucket", func() error {
			_, err := fc.ListIncidents(ctx, &policydv1.ListIncidentsRequest{Bucket: long + long + long + long})
			return err
		}, "bucket"},
		{"id", func() error { _, err := fc.GetIncident(ctx, &policydv1.GetIncidentRequest{}); return err }, "id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if status.Code(err) != codes.InvalidArgument || violationField(err) != tt.field {
				t.Errorf("%v, want InvalidArgument naming %s", err, tt.field)
			}
		})
	}
	if _, err := fc.GetIncident(ctx, &policydv1.GetIncidentRequest{Id: 1 << 40}); status.Code(err) != codes.NotFound {
		t.Errorf("GetIncident of no incident: %v, want NotFound", err)
	}

	// Without a journal: FailedPrecondition, saying how to turn it on.
	off := policydv1.NewFleetServiceClient(startServer(t))
	if _, err := off.ListIncidents(testContext(t), &policydv1.ListIncidentsRequest{}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("ListIncidents without a journal: %v, want FailedPrecondition", err)
	}
}
