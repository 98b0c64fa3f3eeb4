package server

import (
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/policy"
)

// TestShutdownEndsHealthWatches: a client watching health (as client-side
// health checking and proxies do) hears NOT_SERVING at Shutdown, and its
// stream then ends, so that GracefulStop does not wait for it until the
// shutdown timeout.
func TestShutdownEndsHealthWatches(t *testing.T) {
	t.Parallel()
	ts := serveTest(t, NewPolicyServer(policy.Builtin()), nil)
	gs, hs, conn := ts.gs, ts.hs, ts.conn

	tests := []struct {
		name    string
		service string
	}{
		{name: "server", service: ""},
		{name: "journal service, NOT_SERVING already", service: "policyd.v1.JournalService"},
	}
	type watch struct {
		stream grpc.ServerStreamingClient[healthpb.HealthCheckResponse]
		first  healthpb.HealthCheckResponse_ServingStatus
	}
	watches := make([]watch, len(tests))
	for i, tt := range tests {
		stream, err := healthpb.NewHealthClient(conn).Watch(t.Context(), &healthpb.HealthCheckRequest{Service: tt.service})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("%s: first Recv: %v", tt.name, err)
		}
		watches[i] = watch{stream, resp.GetStatus()}
	}

	hs.Shutdown()
	stopped := make(chan struct{})
	start := time.Now()
	go func() {
		gs.GracefulStop()
		close(stopped)
	}()
	lasts := make(chan healthpb.HealthCheckResponse_ServingStatus, len(tests))
	for _, w := range watches {
		go func() {
			last := w.first
			for {
				resp, err := w.stream.Recv()
				if err != nil {
					lasts <- last
					return
				}
				last = resp.GetStatus()
			}
		}()
	}
	select {
	case <-stopped:
		t.Logf("GracefulStop took %v", time.Since(start))
	case <-time.After(3 * time.Second):
		t.Fatal("GracefulStop still waiting 3s after Shutdown: the health watches hold it")
	}
	for range tests {
		if last := <-lasts; last != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("last status before a watch ended = %v, want NOT_SERVING", last)
		}
	}
}

// TestShutdownEndsCoordinateStreams: a client's Coordinate stream ends
// UNAVAILABLE at Shutdown (the client reconnects), so that GracefulStop does
// not wait for it until the shutdown timeout.
func TestShutdownEndsCoordinateStreams(t *testing.T) {
	t.Parallel()
	p := policy.Builtin()
	ts := serveTest(t, NewPolicyServer(p, WithFleet(fleet.New(p.Fleet))), nil)
	gs, hs, conn := ts.gs, ts.hs, ts.conn
	s, err := policydv1.NewFleetServiceClient(conn).Coordinate(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&policydv1.CoordinateRequest{ClientId: "a", Usage: []*policydv1.BucketUsage{{
		Target: &policydv1.BucketTarget{Provider: "openai"}, Elapsed: durationpb.New(time.Second)}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	hs.Shutdown()
	stopped := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(stopped)
	}()
	if _, err := s.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("the stream after Shutdown: %v, want UNAVAILABLE", err)
	}
	select {
	case <-stopped:
	case <-time.After(3 * time.Second):
		t.Fatal("GracefulStop still waiting 3s after Shutdown: a Coordinate stream holds it")
	}
}
