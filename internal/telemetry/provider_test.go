package telemetry_test

import (
	"context"
	"encoding/hex"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	collmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	colltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/policy"
	"github.com/policyd/policyd/internal/server"
	"github.com/policyd/policyd/internal/telemetry"
)

// receiver is an OTLP collector on 127.0.0.1: the trace and metrics
// services over gRPC, keeping what it is sent.
type receiver struct {
	colltracepb.UnimplementedTraceServiceServer
	collmetricpb.UnimplementedMetricsServiceServer
	mu      sync.Mutex
	spans   []*tracepb.Span
	service []string // service.name of each resource
	metrics []string
}

func (r *receiver) Export(_ context.Context, req *colltracepb.ExportTraceServiceRequest) (*colltracepb.ExportTraceServiceResponse, error) {
	r.addTraces(req)
	return &colltracepb.ExportTraceServiceResponse{}, nil
}

func (r *receiver) addTraces(req *colltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		r.service = append(r.service, attr(rs.GetResource().GetAttributes(), "service.name"))
		for _, ss := range rs.GetScopeSpans() {
			r.spans = append(r.spans, ss.GetSpans()...)
		}
	}
}

type metricsService struct{ *receiver }

func (m metricsService) Export(_ context.Context, req *collmetricpb.ExportMetricsServiceRequest) (*collmetricpb.ExportMetricsServiceResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, rm := range req.GetResourceMetrics() {
		for _, sm := range rm.GetScopeMetrics() {
			for _, mt := range sm.GetMetrics() {
				m.metrics = append(m.metrics, mt.GetName())
			}
		}
	}
	return &collmetricpb.ExportMetricsServiceResponse{}, nil
}

func attr(kvs []*commonpb.KeyValue, key string) string {
	for _, kv := range kvs {
		if kv.GetKey() == key {
			v := kv.GetValue()
			switch {
			case v.GetStringValue() != "":
				return v.GetStringValue()
			case v.GetIntValue() != 0:
				return strconv.FormatInt(v.GetIntValue(), 10)
			}
			return v.String()
		}
	}
	return ""
}

// startReceiver serves an OTLP gRPC receiver until the test ends.
func startReceiver(t *testing.T) (*receiver, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{}
	gs := grpc.NewServer()
	colltracepb.RegisterTraceServiceServer(gs, r)
	collmetricpb.RegisterMetricsServiceServer(gs, metricsService{r})
	go gs.Serve(lis) //nolint:errcheck // returns at Stop
	t.Cleanup(gs.Stop)
	return r, lis.Addr().String()
}

// serveDaemon serves the policy services with p's instrumentation on
// 127.0.0.1, as runDaemon does, and returns a client and the graceful stop
// to call before p.Shutdown (as runDaemon does: a call's span ends after
// its answer is sent).
func serveDaemon(t *testing.T, p *telemetry.Provider) (policydv1.PolicyServiceClient, func()) {
	t.Helper()
	var opts []server.GRPCOption
	if p != nil {
		opts = append(opts, server.WithStatsHandler(p.StatsHandler()), server.WithMonitoring(telemetry.UnaryServerInterceptor(), nil))
	}
	ps := server.NewPolicyServer(policy.Builtin())
	gs, _ := server.NewGRPCServer(ps, server.NewJournalServer(nil, ps), server.NewFleetServer(nil, ps), slog.New(slog.DiscardHandler), opts...)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis) //nolint:errcheck // returns at Stop
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return policydv1.NewPolicyServiceClient(conn), gs.GracefulStop
}

const (
	traceID  = "4bf92f3577b34da6a3ce929d0e0e4736"
	parentID = "00f067aa0ba902b7"
)

// nextDelay asks for a rate-limited call's next delay inside the caller's
// trace.
func nextDelay(t *testing.T, pc policydv1.PolicyServiceClient) {
	t.Helper()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-"+traceID+"-"+parentID+"-01")
	if _, err := pc.NextDelay(ctx, &policydv1.NextDelayRequest{Attempt: 2, Failure: &policydv1.Failure{HttpStatus: 429}}); err != nil {
		t.Fatal(err)
	}
}

func clearOTelEnv(t *testing.T) {
	for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"} {
		t.Setenv(k, "")
	}
}

// checkNextDelaySpan finds NextDelay's span among spans and checks that it
// continues the caller's trace and carries the decision.
func checkNextDelaySpan(t *testing.T, spans []*tracepb.Span) {
	t.Helper()
	for _, s := range spans {
		if s.GetName() != "policyd.v1.PolicyService/NextDelay" {
			continue
		}
		if got := hex.EncodeToString(s.GetTraceId()); got != traceID {
			t.Errorf("trace id %s, want the caller's %s", got, traceID)
		}
		if got := hex.EncodeToString(s.GetParentSpanId()); got != parentID {
			t.Errorf("parent span %s, want the caller's %s", got, parentID)
		}
		if s.GetKind() != tracepb.Span_SPAN_KIND_SERVER {
			t.Errorf("kind %v", s.GetKind())
		}
		for k, want := range map[string]string{
			telemetry.AttrAction: "RETRY", telemetry.AttrFailureType: "RATE_LIMIT", "rpc.method": "policyd.v1.PolicyService/NextDelay",
			telemetry.AttrAttempt: "2",
		} {
			if got := attr(s.GetAttributes(), k); got != want {
				t.Errorf("span attribute %s = %q, want %q", k, got, want)
			}
		}
		if attr(s.GetAttributes(), telemetry.AttrRule) == "" {
			t.Errorf("no %s on the span", telemetry.AttrRule)
		}
		return
	}
	names := []string{}
	for _, s := range spans {
		names = append(names, s.GetName())
	}
	t.Fatalf("no NextDelay span among %v", names)
}

// TestExportsOverOTLPgRPC: with OTEL_EXPORTER_OTLP_ENDPOINT and the grpc
// protocol, a NextDelay's span reaches an OTLP receiver (flushed by
// Shutdown), in the caller's trace and with the decision; and so do the
// instrumentation's RPC metrics.
func TestExportsOverOTLPgRPC(t *testing.T) {
	clearOTelEnv(t)
	r, addr := startReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+addr)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	decisions := prometheus.NewCounter(prometheus.CounterOpts{Name: "policyd_test_decisions_total", Help: "A stand-in for the daemon's own."})
	reg.MustRegister(decisions)
	decisions.Inc()
	p, err := telemetry.FromEnv(ctx, "test", telemetry.WithGatherer(reg))
	if err != nil || p == nil {
		t.Fatalf("FromEnv: %v, %v", p, err)
	}
	if got := strings.Join(p.Signals(), ","); got != "traces,metrics" {
		t.Errorf("signals %q", got)
	}
	pc, stop := serveDaemon(t, p)
	nextDelay(t, pc)
	stop()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := p.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	checkNextDelaySpan(t, r.spans)
	if len(r.service) == 0 || r.service[0] != "policyd" {
		t.Errorf("service.name = %v, want policyd", r.service)
	}
	rpc := false
	for _, m := range r.metrics {
		rpc = rpc || strings.HasPrefix(m, "rpc.server.")
	}
	if !rpc {
		t.Errorf("no rpc.server.* metric among %v", r.metrics)
	}
	if !slices.Contains(r.metrics, "policyd_test_decisions_total") {
		t.Errorf("the gatherer's metric is not among %v", r.metrics)
	}
}

// TestExportsOverOTLPHTTP: the default protocol, http/protobuf, to a
// per-signal endpoint; metrics stay off without an endpoint of theirs.
func TestExportsOverOTLPHTTP(t *testing.T) {
	clearOTelEnv(t)
	r := &receiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var tr colltracepb.ExportTraceServiceRequest
		if req.URL.Path != "/v1/traces" || proto.Unmarshal(body, &tr) != nil {
			http.Error(w, "not a trace export", http.StatusBadRequest)
			return
		}
		r.addTraces(&tr)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", srv.URL+"/v1/traces")
	t.Setenv("OTEL_SERVICE_NAME", "policyd-eu")
	p, err := telemetry.FromEnv(context.Background(), "test")
	if err != nil || p == nil {
		t.Fatalf("FromEnv: %v, %v", p, err)
	}
	if got := strings.Join(p.Signals(), ","); got != "traces" {
		t.Errorf("signals %q, want traces only", got)
	}
	pc, stop := serveDaemon(t, p)
	nextDelay(t, pc)
	stop()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	checkNextDelaySpan(t, r.spans)
	if len(r.service) == 0 || r.service[0] != "policyd-eu" {
		t.Errorf("service.name = %v, want OTEL_SERVICE_NAME's policyd-eu", r.service)
	}
}

func TestFromEnvOff(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		err  string
	}{
		{name: "no endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}},
		{name: "disabled", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}},
		{name: "exporters none", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
			"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"}},
		{name: "not otlp", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "zipkin"}, err: "zipkin"},
		{name: "bad protocol", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, err: "http/json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearOTelEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			p, err := telemetry.FromEnv(context.Background(), "test")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("err = %v, want one naming %q", err, tc.err)
				}
				return
			}
			if p != nil || err != nil {
				t.Errorf("FromEnv = %v, %v; want nothing installed", p, err)
			}
		})
	}
}
