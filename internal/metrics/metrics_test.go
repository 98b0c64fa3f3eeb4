package metrics_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/status"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/fleet/pgexchange"
	"github.com/policyd/policyd/internal/journal"
	"github.com/policyd/policyd/internal/journal/journaltest"
	"github.com/policyd/policyd/internal/metrics"
	"github.com/policyd/policyd/internal/policy"
	"github.com/policyd/policyd/internal/server"
)

func TestMain(m *testing.M) { journaltest.Main(m) }

var quiet = slog.New(slog.DiscardHandler)

// daemon is a policyd wired as serve wires it with --metrics-listen: a
// real gRPC server, a journal on a real PostgreSQL, metrics over HTTP.
type daemon struct {
	policy  policydv1.PolicyServiceClient
	store   *journal.Store
	hs      *server.Health
	httpURL string
}

func startDaemon(t *testing.T) *daemon {
	t.Helper()
	ctx := testContext(t)
	ms := metrics.New()
	store, err := journal.Open(ctx, journaltest.DatabaseURL(t), journal.WithLogger(quiet), journal.WithObserver(ms))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	ms.ObserveJournal(store)
	ps := server.NewPolicyServer(policy.Builtin(), server.WithJournal(store, 2*time.Second), server.WithDecisionObserver(ms))
	gs, hs := server.NewGRPCServer(ps, server.NewJournalServer(store, ps), server.NewFleetServer(nil, ps), quiet,
		server.WithMonitoring(ms.UnaryServerInterceptor(), ms.StreamServerInterceptor()))
	go server.WatchJournal(t.Context(), hs, store)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis) //nolint:errcheck // Serve returns nil after Stop.
	t.Cleanup(gs.Stop)
	hsrv, err := ms.Listen(ctx, "127.0.0.1:0", hs, quiet, false)
	if err != nil {
		t.Fatal(err)
	}
	go hsrv.Serve() //nolint:errcheck // nil after Shutdown
	t.Cleanup(func() { _ = hsrv.Shutdown(context.Background()) })
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &daemon{policy: policydv1.NewPolicyServiceClient(conn), store: store, hs: hs, httpURL: "http://" + hsrv.Addr().String()}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// get fetches path from the daemon's HTTP server.
func (d *daemon) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(d.httpURL + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, string(body)
}

// scrape fetches and parses /metrics.
func (d *daemon) scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := d.get(t, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d\n%s", code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	return families
}

// value is the value of the series of family name whose labels include
// labels (a counter's or gauge's value, a histogram's count); found is
// false when there is none.
func value(families map[string]*dto.MetricFamily, name string, labels map[string]string) (v float64, found bool) {
	mf := families[name]
	if mf == nil {
		return 0, false
	}
series:
	for _, m := range mf.GetMetric() {
		got := map[string]string{}
		for _, lp := range m.GetLabel() {
			got[lp.GetName()] = lp.GetValue()
		}
		for k, want := range labels {
			if got[k] != want {
				continue series
			}
		}
		switch {
		case m.GetCounter() != nil:
			v += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			v += m.GetGauge().GetValue()
		case m.GetHistogram() != nil:
			v += float64(m.GetHistogram().GetSampleCount())
		}
		found = true
	}
	return v, found
}

// TestScrapeAfterCalls makes real calls, journaled and not, successful and
// failing, and reads each metric they should have moved from /metrics.
func TestScrapeAfterCalls(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	ctx := testContext(t)
	id := uuid.NewString()
	calls := []struct {
		req      *policydv1.NextDelayRequest
		wantCode codes.Code
	}{
		{&policydv1.NextDelayRequest{ContextId: id, Attempt: 1, Failure: &policydv1.Failure{HttpStatus: 429}}, codes.OK},
		{&policydv1.NextDelayRequest{ContextId: id, Attempt: 2, Failure: &policydv1.Failure{HttpStatus: 429}}, codes.OK},
		{&policydv1.NextDelayRequest{Attempt: 1, Failure: &policydv1.Failure{HttpStatus: 401}}, codes.OK},
		{&policydv1.NextDelayRequest{Attempt: 1, Failure: &policydv1.Failure{HttpStatus: 42}}, codes.InvalidArgument},
	}
	for _, c := range calls {
		resp, err := d.policy.NextDelay(ctx, c.req)
		if status.Code(err) != c.wantCode {
			t.Fatalf("NextDelay(%v): %v, want %v", c.req, err, c.wantCode)
		}
		if c.req.GetContextId() != "" && !resp.GetDecision().GetJournaled() {
			t.Fatalf("NextDelay(%v): not journaled", c.req)
		}
	}

	families := d.scrape(t)
	grpcLabels := func(code string) map[string]string {
		return map[string]string{"grpc_service": "policyd.v1.PolicyService", "grpc_method": "NextDelay", "grpc_code": code}
	}
	tests := []struct {
		name   string
		metric string
		labels map[string]string
		want   float64 // -1: present with any value > 0
	}{
		{"rate limits retried", "policyd_decisions_total",
			map[string]string{"profile": "default", "failure_type": "RATE_LIMIT", "action": "RETRY"}, 2},
		{"auth failure stopped", "policyd_decisions_total",
			map[string]string{"profile": "default", "failure_type": "AUTH_INVALID", "action": "STOP"}, 1},
		{"decisions in all", "policyd_decisions_total", nil, 3},
		{"journaled", "policyd_nextdelay_journal_total", map[string]string{"result": "journaled"}, 2},
		{"nothing dropped", "policyd_nextdelay_journal_total", map[string]string{"result": "dropped"}, 0},
		{"handled OK", "grpc_server_handled_total", grpcLabels("OK"), 3},
		// The status mapping runs inside the metrics: a FieldError is
		// counted as the InvalidArgument the client got.
		{"handled InvalidArgument", "grpc_server_handled_total", grpcLabels("InvalidArgument"), 1},
		{"handling time", "grpc_server_handling_seconds",
			map[string]string{"grpc_service": "policyd.v1.PolicyService", "grpc_method": "NextDelay"}, 4},
		{"batches committed", "policyd_journal_batch_size", nil, -1},
		{"commit latency", "policyd_journal_commit_seconds", nil, -1},
		{"no failed batch", "policyd_journal_batch_failures_total", nil, 0},
		{"queue empty", "policyd_journal_queue_depth", nil, 0},
		{"journal up", "policyd_journal_up", nil, 1},
		{"go runtime", "go_goroutines", nil, -1},
		{"process", "process_resident_memory_bytes", nil, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, found := value(families, tt.metric, tt.labels)
			switch {
			case !found:
				t.Errorf("no %s%v in /metrics", tt.metric, tt.labels)
			case tt.want < 0 && got <= 0:
				t.Errorf("%s%v = %v, want > 0", tt.metric, tt.labels, got)
			case tt.want >= 0 && got != tt.want:
				t.Errorf("%s%v = %v, want %v", tt.metric, tt.labels, got, tt.want)
			}
		})
	}
	// Two journaled calls, one after the other: every committed record is
	// in the batch sizes.
	if mf := families["policyd_journal_batch_size"]; mf != nil {
		if sum := mf.GetMetric()[0].GetHistogram().GetSampleSum(); sum != 2 {
			t.Errorf("policyd_journal_batch_size sum = %v, want 2 records", sum)
		}
	}
}

// TestDroppedAndJournalDown: with the journal closed, a NextDelay that asks
// for it still answers, unjournaled, and counts as dropped; the journal
// gauge says down and JournalService's readiness follows.
func TestDroppedAndJournalDown(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	d.store.Close()
	resp, err := d.policy.NextDelay(testContext(t), &policydv1.NextDelayRequest{ContextId: uuid.NewString(), Attempt: 1,
		Failure: &policydv1.Failure{HttpStatus: 503}})
	if err != nil || resp.GetDecision().GetJournaled() {
		t.Fatalf("NextDelay with the journal closed: journaled=%v, err %v", resp.GetDecision().GetJournaled(), err)
	}
	families := d.scrape(t)
	for _, c := range []struct {
		metric string
		labels map[string]string
		want   float64
	}{
		{"policyd_nextdelay_journal_total", map[string]string{"result": "dropped"}, 1},
		{"policyd_nextdelay_journal_total", map[string]string{"result": "journaled"}, 0},
		{"policyd_journal_up", nil, 0},
	} {
		if got, found := value(families, c.metric, c.labels); !found || got != c.want {
			t.Errorf("%s%v = %v (found %v), want %v", c.metric, c.labels, got, found, c.want)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, _ := d.get(t, "/readyz?service=policyd.v1.JournalService")
		if code == http.StatusServiceUnavailable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz?service=policyd.v1.JournalService = %d 5s after the journal closed, want 503", code)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, body := d.get(t, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz with the journal down = %d %s, want 200: NextDelay still answers", code, body)
	}
}

// TestHTTPHealth: /healthz and /readyz mirror the gRPC health server,
// before and after Shutdown.
func TestHTTPHealth(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	type probe struct {
		path     string
		wantCode int
	}
	check := func(phase string, probes []probe) {
		t.Helper()
		for _, p := range probes {
			if code, body := d.get(t, p.path); code != p.wantCode {
				t.Errorf("%s: GET %s = %d %q, want %d", phase, p.path, code, body, p.wantCode)
			}
		}
	}
	check("serving", []probe{
		{"/healthz", http.StatusOK},
		{"/readyz", http.StatusOK},
		{"/readyz?service=policyd.v1.PolicyService", http.StatusOK},
		{"/readyz?service=policyd.v1.JournalService", http.StatusOK},
		{"/readyz?service=nope", http.StatusNotFound},
		{"/nope", http.StatusNotFound},
	})
	d.hs.Shutdown()
	check("shutting down", []probe{
		{"/healthz", http.StatusOK},
		{"/readyz", http.StatusServiceUnavailable},
		{"/readyz?service=policyd.v1.PolicyService", http.StatusServiceUnavailable},
		{"/readyz?service=policyd.v1.JournalService", http.StatusServiceUnavailable},
	})
}

// TestDecidedBoundsLabels: failure types and actions outside the API's
// enums and profiles past MaxProfiles fold into bounded label values.
func TestDecidedBoundsLabels(t *testing.T) {
	t.Parallel()
	ms := metrics.New()
	dec := func(ft policydv1.FailureType, a policydv1.Action) *policydv1.Decision {
		return &policydv1.Decision{Action: a, Classification: &policydv1.Classification{FailureType: ft}}
	}
	ms.Decided("default", dec(999, 999), server.JournalNotAsked)
	for i := range metrics.MaxProfiles + 5 {
		ms.Decided(fmt.Sprintf("p%d", i), dec(policydv1.FailureType_FAILURE_TYPE_TIMEOUT, policydv1.Action_ACTION_RETRY), server.JournalNotAsked)
	}
	families, err := ms.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, mf := range families {
		byName[mf.GetName()] = mf
	}
	tests := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"unknown enums", map[string]string{"profile": "default", "failure_type": "UNKNOWN", "action": "UNSPECIFIED"}, 1},
		{"first profiles by name", map[string]string{"profile": "p0"}, 1},
		{"profiles past the bound", map[string]string{"profile": "other"}, 6},
		{"in all", nil, metrics.MaxProfiles + 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got, _ := value(byName, "policyd_decisions_total", tt.labels); got != tt.want {
				t.Errorf("policyd_decisions_total%v = %v, want %v", tt.labels, got, tt.want)
			}
		})
	}
	if n := len(byName["policyd_decisions_total"].GetMetric()); n > metrics.MaxProfiles+1 {
		t.Errorf("%d decision series, want at most %d", n, metrics.MaxProfiles+1)
	}
}

// Go's profiles are served only when asked for.
func TestProfilingEndpoint(t *testing.T) {
	t.Parallel()
	for _, profiling := range []bool{false, true} {
		ms := metrics.New()
		hsrv, err := ms.Listen(t.Context(), "127.0.0.1:0", health.NewServer(), quiet, profiling)
		if err != nil {
			t.Fatal(err)
		}
		go hsrv.Serve() //nolint:errcheck // nil after Shutdown
		resp, err := http.Get("http://" + hsrv.Addr().String() + "/debug/pprof/cmdline")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := http.StatusNotFound
		if profiling {
			want = http.StatusOK
		}
		if resp.StatusCode != want {
			t.Errorf("profiling=%v: /debug/pprof/cmdline answered %d, want %d", profiling, resp.StatusCode, want)
		}
		hsrv.Shutdown(context.Background()) //nolint:errcheck // a test server
	}
}

// The fleet's stream metrics, read from a fleet that got a report.
func TestFleetStreamMetrics(t *testing.T) {
	ms := metrics.New()
	f := fleet.New(fleet.Defaults())
	ms.ObserveFleet(f)
	f.StreamOpened()
	target := fleet.Target{Provider: "openai", Model: "gpt-4o", KeyID: "k"}
	f.Report(fleet.Usage{Target: target, ClientID: "a", Admitted: 7, Shed: 3, Succeeded: 6})
	f.CountAssignments(target, 2)
	mfs, err := ms.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	families := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		families[mf.GetName()] = mf
	}
	model := map[string]string{"provider": "openai", "model": "gpt-4o"}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"policyd_fleet_streams", nil, 1},
		{"policyd_fleet_stream_reports_total", model, 1},
		{"policyd_fleet_stream_assignments_total", model, 2},
		{"policyd_fleet_first_attempts_total", map[string]string{"provider": "openai", "model": "gpt-4o", "outcome": "admitted"}, 7},
		{"policyd_fleet_first_attempts_total", map[string]string{"provider": "openai", "model": "gpt-4o", "outcome": "shed"}, 3},
		{"policyd_fleet_streaming_clients", model, 1},
		{"policyd_fleet_admit_fraction", model, 1},
	} {
		if got, ok := value(families, c.name, c.labels); !ok || got != c.want {
			t.Errorf("%s%v = %v (found %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
}

func TestFleetSyncMetrics(t *testing.T) {
	url := journaltest.DatabaseURL(t)
	ex, err := pgexchange.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	ms := metrics.New()
	f := fleet.New(fleet.Defaults(), fleet.WithReplica("r1"))
	s := fleet.NewSyncer(f, ex)
	ms.ObserveFleetSync(s)
	gather := func() map[string]*dto.MetricFamily {
		mfs, err := ms.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		families := map[string]*dto.MetricFamily{}
		for _, mf := range mfs {
			families[mf.GetName()] = mf
		}
		return families
	}
	if err := s.Step(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	families := gather()
	for _, c := range []struct {
		name string
		want float64
	}{{"policyd_fleet_sync_up", 1}, {"policyd_fleet_replicas", 1}, {"policyd_fleet_sync_rounds_total", 1}, {"policyd_fleet_sync_errors_total", 0}} {
		if got, ok := value(families, c.name, nil); !ok || got != c.want {
			t.Errorf("%s = %v (found %v), want %v", c.name, got, ok, c.want)
		}
	}
	// The database gone: the round fails, and the gauge says so.
	ex.Close()
	if err := s.Step(context.Background(), true); err == nil {
		t.Fatal("a round on a closed exchange succeeded")
	}
	if got, _ := value(gather(), "policyd_fleet_sync_up", nil); got != 0 {
		t.Errorf("policyd_fleet_sync_up = %v after a failed round, want 0", got)
	}
}
