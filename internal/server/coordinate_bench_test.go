package server

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/policy"
)

// BenchmarkCoordinateReport is the daemon's cost of one client's report:
// sent on a real stream over loopback, decoded, validated, applied to the
// fleet, its assignment recomputed and compared (nothing changes, so
// nothing is sent back). Reports are pipelined on one stream; the clock
// stops when the daemon has applied the last one. `make bench` turns it into
// clients per core (docs/benchmarks.md).
func BenchmarkCoordinateReport(b *testing.B) {
	p := policy.Builtin()
	// One stream sends far more than a tenant's usual reports a second:
	// the daemon's cost of each is measured, not its per-tenant limit.
	p.Fleet.ReportsPerSecond = 0
	f := fleet.New(p.Fleet)
	conn := serveTest(b, NewPolicyServer(p, WithFleet(f)), nil).conn
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fc := policydv1.NewFleetServiceClient(conn)
	s, err := fc.Coordinate(ctx)
	if err != nil {
		b.Fatal(err)
	}
	report := &policydv1.CoordinateRequest{ClientId: "bench", Usage: []*policydv1.BucketUsage{{
		Target:  &policydv1.BucketTarget{Provider: "openai", Model: "gpt-4o", KeyId: "prod"},
		Elapsed: durationpb.New(time.Second), Admitted: 12, Succeeded: 12,
		RateLimitHeaders: map[string]string{"x-ratelimit-limit-requests": "10000", "x-ratelimit-remaining-requests": "9990"},
	}}}
	if err := s.Send(report); err != nil {
		b.Fatal(err)
	}
	if _, err := s.Recv(); err != nil { // the first assignment: subscribed
		b.Fatal(err)
	}
	reports := func() int64 {
		r, err := fc.GetBucket(ctx, &policydv1.GetBucketRequest{Bucket: "availability:openai/gpt-4o"})
		if err != nil {
			b.Fatal(err)
		}
		return r.GetBucket().GetReports()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := s.Send(report); err != nil {
			b.Fatal(err)
		}
	}
	for reports() < int64(b.N)+1 {
		time.Sleep(100 * time.Microsecond)
	}
}
