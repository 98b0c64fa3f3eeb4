package main

import (
	"context"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	collmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	colltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

// otlpReceiver is an OTLP collector on 127.0.0.1 (the trace and metrics
// services over gRPC) that keeps the names of the spans and metrics it is
// sent.
type otlpReceiver struct {
	colltracepb.UnimplementedTraceServiceServer
	mu      sync.Mutex
	spans   []string
	metrics []string
}

func (r *otlpReceiver) Export(_ context.Context, req *colltracepb.ExportTraceServiceRequest) (*colltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, s.GetName())
			}
		}
	}
	return &colltracepb.ExportTraceServiceResponse{}, nil
}

type otlpMetrics struct {
	collmetricpb.UnimplementedMetricsServiceServer
	r *otlpReceiver
}

func (m otlpMetrics) Export(_ context.Context, req *collmetricpb.ExportMetricsServiceRequest) (*collmetricpb.ExportMetricsServiceResponse, error) {
	m.r.mu.Lock()
	defer m.r.mu.Unlock()
	for _, rm := range req.GetResourceMetrics() {
		for _, sm := range rm.GetScopeMetrics() {
			for _, mt := range sm.GetMetrics() {
				m.r.metrics = append(m.r.metrics, mt.GetName())
			}
		}
	}
	return &collmetricpb.ExportMetricsServiceResponse{}, nil
}

// The binary with OTEL_EXPORTER_OTLP_ENDPOINT: a NextDelay's span, the RPC
// metrics and the daemon's own metrics reach the OTLP receiver by the time a SIGTERM'd daemon has
// exited (the provider is flushed at stop). Not parallel: it sets the
// environment the daemon inherits.
func TestServeExportsOTLPE2E(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{}
	gs := grpc.NewServer()
	colltracepb.RegisterTraceServiceServer(gs, r)
	collmetricpb.RegisterMetricsServiceServer(gs, otlpMetrics{r: r})
	go gs.Serve(lis) //nolint:errcheck // returns at Stop
	defer gs.Stop()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+lis.Addr().String())
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	d := startDaemon(t, ctx)
	if !d.hasRecord(map[string]string{"msg": "exporting over OTLP"}) {
		t.Errorf("no \"exporting over OTLP\" record:\n%s", d.logs.String())
	}
	if _, err := d.dial(t).NextDelay(ctx, &policydv1.NextDelayRequest{Attempt: 1, Failure: &policydv1.Failure{HttpStatus: 503}}); err != nil {
		t.Fatal(err)
	}
	d.terminate(t, 20*time.Second)
	r.mu.Lock()
	defer r.mu.Unlock()
	found := false
	for _, s := range r.spans {
		found = found || s == "policyd.v1.PolicyService/NextDelay"
	}
	if !found {
		t.Errorf("no NextDelay span reached the receiver: %v", r.spans)
	}
	// The daemon's own metrics go with the instrumentation's, without
	// --metrics-listen.
	for _, want := range []string{"policyd_decisions_total", "rpc.server.call.duration"} {
		if !slices.Contains(r.metrics, want) {
			t.Errorf("%s did not reach the receiver: %v", want, r.metrics)
		}
	}
}

// An OTLP setting the daemon cannot honour stops the start, naming the
// variable.
func TestServeBadOTLPSettingE2E(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	runCommand(t, policydBinary(t), "", []string{"serve", "--listen", "127.0.0.1:0"}, 2, "", `OTEL_EXPORTER_OTLP_PROTOCOL="http/json"`)
}
