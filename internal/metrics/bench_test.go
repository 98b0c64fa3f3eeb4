package metrics_test

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/metrics"
	"github.com/policyd/policyd/internal/policy"
	"github.com/policyd/policyd/internal/server"
)

// BenchmarkNextDelay is one unjournaled NextDelay through the whole
// interceptor chain over an in-memory connection, without and with
// metrics, so that the cost the metrics add per call shows as the
// difference (the journal is left out: its commit would drown it).
func BenchmarkNextDelay(b *testing.B) {
	for _, bc := range []struct {
		name    string
		metrics bool
	}{{"plain", false}, {"metrics", true}} {
		b.Run(bc.name, func(b *testing.B) {
			var (
				psOpts []server.Option
				gOpts  []server.GRPCOption
			)
			if bc.metrics {
				ms := metrics.New()
				psOpts = append(psOpts, server.WithDecisionObserver(ms))
				gOpts = append(gOpts, server.WithMonitoring(ms.UnaryServerInterceptor(), ms.StreamServerInterceptor()))
			}
			ps := server.NewPolicyServer(policy.Builtin(), psOpts...)
			gs, _ := server.NewGRPCServer(ps, server.NewJournalServer(nil, ps), server.NewFleetServer(nil, ps), quiet, gOpts...)
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

// BenchmarkDecided is the per-decision cost of the decision counters:
// after the first call of a label set, an atomic load and an increment.
func BenchmarkDecided(b *testing.B) {
	ms := metrics.New()
	d := &policydv1.Decision{Action: policydv1.Action_ACTION_RETRY,
		Classification: &policydv1.Classification{FailureType: policydv1.FailureType_FAILURE_TYPE_RATE_LIMIT}}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			ms.Decided("default", d, server.JournalCommitted)
		}
	})
}
