package telemetry

import (
	"context"
	"log/slog"
	"net"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/policy"
	"github.com/policyd/policyd/internal/server"
)

// discard is a span exporter that drops what it is given, so that the
// benchmark measures the daemon's side of tracing, not an exporter's.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkNextDelay is one unjournaled NextDelay through the whole
// server over an in-memory connection: "off" as the daemon runs without
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
			lis := bufconn.Listen(1 << 20)
			go gs.Serve(lis) //nolint:errcheck // Serve returns nil after Stop.
			defer gs.Stop()
			conn, err := grpc.NewClient("passthrough:///bufnet",
				grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
				grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			client := policydv1.NewPolicyServiceClient(conn)
			req := &policydv1.NextDelayRequest{Attempt: 1, Failure: &policydv1.Failure{HttpStatus: 429, Headers: map[string]string{"retry-after": "2"}}}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := client.NextDelay(ctx, req); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
