package metrics_test

import (
	"testing"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/metrics"
	"github.com/policyd/policyd/internal/policy"
	"github.com/policyd/policyd/internal/server"
	"github.com/policyd/policyd/internal/server/servertest"
)

// BenchmarkNextDelay is one unjournaled NextDelay through the whole
// interceptor chain over an in-memory connection
// (servertest.BenchNextDelay), without and with metrics, so that the cost
// the metrics add per call shows as the difference.
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
			servertest.BenchNextDelay(b, gs)
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
