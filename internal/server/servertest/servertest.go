// Package servertest runs policyd's gRPC server in memory for the
// benchmarks of the packages that instrument it (metrics, telemetry): one
// call, measured the same way everywhere, so that what an instrumentation
// costs shows as the difference between its runs with it off and on
// (docs/benchmarks.md).
package servertest

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

// BenchNextDelay measures one unjournaled NextDelay (a 429 with
// retry-after: 2) through gs, the whole server, from parallel callers over
// an in-memory connection; the journal is left out, its commit would drown
// the difference. gs is served until the benchmark returns.
func BenchNextDelay(b *testing.B, gs *grpc.Server) {
	b.Helper()
	lis := bufconn.Listen(1 << 20)
	go gs.Serve(lis) //nolint:errcheck // Serve returns nil after Stop.
	defer gs.Stop()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close() //nolint:errcheck // a benchmark's connection: nothing to do about a failed close
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
}
