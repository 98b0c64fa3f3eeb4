package server

import (
	"log/slog"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/journal"
	"github.com/policyd/policyd/internal/journal/journaltest"
	"github.com/policyd/policyd/internal/policy"
)

// TestReadinessFollowsJournal stops and restarts PostgreSQL under an idle
// server: policyd.v1.JournalService turns NOT_SERVING by itself (no call
// needed to notice) and SERVING again after the restart, while "" and
// policyd.v1.PolicyService stay SERVING and NextDelay answers. Shutdown
// turns everything NOT_SERVING.
func TestReadinessFollowsJournal(t *testing.T) {
	t.Parallel()
	pg := journaltest.NewServer(t)
	store, err := journal.Open(testContext(t), pg.DatabaseURL(t), journal.WithLogger(slog.New(slog.DiscardHandler)),
		journal.WithHealthInterval(100*time.Millisecond), journal.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	ps := NewPolicyServer(policy.Builtin(), WithJournal(store, time.Second))
	ts := serveTest(t, ps, nil)
	hs, conn := ts.hs, ts.conn
	hc := healthpb.NewHealthClient(conn)
	pc := policydv1.NewPolicyServiceClient(conn)

	const (
		serving    = healthpb.HealthCheckResponse_SERVING
		notServing = healthpb.HealthCheckResponse_NOT_SERVING
	)
	check := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		resp, err := hc.Check(testContext(t), &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatalf("Check(%q): %v", service, err)
		}
		return resp.GetStatus()
	}
	journalSvc := policydv1.JournalService_ServiceDesc.ServiceName
	waitFor := func(want healthpb.HealthCheckResponse_ServingStatus, within time.Duration) {
		t.Helper()
		start := time.Now()
		for got := check(journalSvc); got != want; got = check(journalSvc) {
			if time.Since(start) > within {
				t.Fatalf("%s still %v after %v, want %v", journalSvc, got, within, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("%s %v after %v", journalSvc, want, time.Since(start).Round(time.Millisecond))
	}
	always := func(phase string) {
		t.Helper()
		for _, svc := range []string{"", policydv1.PolicyService_ServiceDesc.ServiceName} {
			if got := check(svc); got != serving {
				t.Errorf("%s: health of %q = %v, want SERVING", phase, svc, got)
			}
		}
	}

	waitFor(serving, 0)
	always("database up")

	pg.Stop(t)
	// No traffic: the store's own ping finds the outage (every 10 health
	// intervals, here 1s).
	waitFor(notServing, 5*time.Second)
	always("database down")
	resp, err := pc.NextDelay(testContext(t), &policydv1.NextDelayRequest{ContextId: "0b0e4a36-2a57-4f38-9a3e-4c7f54a5c2a1",
		Attempt: 1, Failure: &policydv1.Failure{HttpStatus: 503}})
	if err != nil || resp.GetDecision().GetJournaled() {
		t.Errorf("NextDelay with the database down: journaled=%v, err %v; want an unjournaled answer", resp.GetDecision().GetJournaled(), err)
	}

	pg.Start(t)
	waitFor(serving, 15*time.Second)
	always("database back")

	hs.Shutdown()
	for _, svc := range []string{"", policydv1.PolicyService_ServiceDesc.ServiceName, journalSvc} {
		if got := check(svc); got != notServing {
			t.Errorf("after Shutdown: health of %q = %v, want NOT_SERVING", svc, got)
		}
	}
}
