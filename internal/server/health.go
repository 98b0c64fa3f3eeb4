package server

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Health is the grpc.health.v1 service of NewGRPCServer: a health.Server
// whose Shutdown, besides turning every service NOT_SERVING for good, ends
// the Watch streams once they have sent NOT_SERVING. Without that, a client
// that watches health (client-side health checking, a proxy) would hold
// grpc.Server.GracefulStop until its timeout, since a Watch never ends by
// itself.
type Health struct {
	*health.Server
	drain     chan struct{}
	drainOnce sync.Once
}

// watchDrainGrace bounds how long, after Shutdown, a Watch stream may take
// to send its NOT_SERVING before it is ended anyway.
const watchDrainGrace = time.Second

func newHealth() *Health {
	return &Health{Server: health.NewServer(), drain: make(chan struct{})}
}

// Shutdown sets every service NOT_SERVING, ignores later changes, and ends
// the Watch streams after they have told their clients.
func (h *Health) Shutdown() {
	h.Server.Shutdown()
	h.drainOnce.Do(func() { close(h.drain) })
}

// Watch is health.Server's Watch, ended by Shutdown.
func (h *Health) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	ds := &drainingStream{Health_WatchServer: stream, ctx: ctx, cancel: cancel, drain: h.drain}
	go func() {
		select {
		case <-ctx.Done():
			return
		case <-h.drain:
		}
		if ds.notServing.Load() { // told already; no change is coming
			cancel()
			return
		}
		select { // Send cancels once it has sent NOT_SERVING
		case <-ctx.Done():
		case <-time.After(watchDrainGrace):
			cancel()
		}
	}()
	return h.Server.Watch(req, ds)
}

// drainingStream is a Watch stream that ends itself (cancels its context)
// when it sends NOT_SERVING after Shutdown.
type drainingStream struct {
	healthpb.Health_WatchServer
	ctx        context.Context
	cancel     context.CancelFunc
	drain      <-chan struct{}
	notServing atomic.Bool // the last status sent
}

func (s *drainingStream) Context() context.Context { return s.ctx }

func (s *drainingStream) Send(resp *healthpb.HealthCheckResponse) error {
	err := s.Health_WatchServer.Send(resp)
	notServing := resp.GetStatus() != healthpb.HealthCheckResponse_SERVING
	s.notServing.Store(notServing)
	if notServing {
		select {
		case <-s.drain:
			s.cancel()
		default:
		}
	}
	return err
}
