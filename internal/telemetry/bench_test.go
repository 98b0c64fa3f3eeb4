package telemetry

import (
	"context"
	"log/slog"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/policyd/policyd/internal/policy"
	"github.com/policyd/policyd/internal/server"
	"github.com/policyd/policyd/internal/server/servertest"
)

// discard is a span exporter that drops what it is given, so that the
// benchmark measures the daemon's side of tracing, not an exporter's.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkNextDelay is one unjournaled NextDelay through the whole
// server over an in-memory connection (servertest.BenchNextDelay, the call
// internal/metrics' benchmark measures): "off" as the daemon runs without
// OTEL_EXPORTER_OTLP_* (nothing installed), "sampled" with every call
// traced and its span batched for export, "unsampled" with the
// instrumentation installed but the sampler saying no (the cost of
// OTEL_TRACES_SAMPLER=traceidratio at a low ratio, per unsampled call).
func BenchmarkNextDelay(b *testing.B) {
	for _, bc := range []struct {
		name    string
		sampler sdktrace.Sampler // nil: off
	}{{"off", nil}, {"sampled", sdktrace.AlwaysSample()}, {"unsampled", sdktrace.NeverSample()}} {
		b.Run(bc.name, func(b *testing.B) {
			var opts []server.GRPCOption
			if bc.sampler != nil {
				p := &Provider{tp: sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}), sdktrace.WithSampler(bc.sampler))}
				defer p.Shutdown(context.Background()) //nolint:errcheck // nothing to flush to
				opts = append(opts, server.WithStatsHandler(p.StatsHandler()), server.WithMonitoring(UnaryServerInterceptor(), nil))
			}
			ps := server.NewPolicyServer(policy.Builtin())
			gs, _ := server.NewGRPCServer(ps, server.NewJournalServer(nil, ps), server.NewFleetServer(nil, ps), slog.New(slog.DiscardHandler), opts...)
			servertest.BenchNextDelay(b, gs)
		})
	}
}
