package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// HTTPServer serves the metrics and the health over plain HTTP, for
// Prometheus and for probes that speak HTTP rather than gRPC:
//
//   - /metrics: the registry in the Prometheus text format;
//   - /healthz: 200 while the process serves HTTP at all (liveness);
//   - /readyz: 200 when the gRPC health of ?service= (default "", the
//     whole server) is SERVING, else 503 with the status; so a probe of
//     /readyz?service=policyd.v1.JournalService follows the journal.
//
// It reads health from the same health server as grpc.health.v1, so HTTP
// and gRPC probes never disagree.
type HTTPServer struct {
	srv *http.Server
	lis net.Listener
	mux *http.ServeMux
}

// HealthChecker answers a grpc.health.v1 Check: a health.Server, or the
// server.Health of server.NewGRPCServer.
type HealthChecker interface {
	Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error)
}

// Listen listens on addr (host:port; port 0 picks one) for m's metrics and
// hs's health, and with profiling Go's profiles under /debug/pprof/ (off
// by default: a CPU profile costs the daemon while it runs, so only an
// operator who asked for it should be able to start one). Serve it with
// Serve, stop it with Shutdown.
func (m *Metrics) Listen(ctx context.Context, addr string, hs HealthChecker, logger *slog.Logger, profiling bool) (*HTTPServer, error) {
	lis, err := new(net.ListenConfig).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelError),
		Registry:          m.reg, // promhttp_metric_handler_errors_total
		EnableOpenMetrics: true,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		service := r.URL.Query().Get("service")
		resp, err := hs.Check(r.Context(), &healthpb.HealthCheckRequest{Service: service})
		if err != nil { // an unknown service
			http.Error(w, fmt.Sprintf("service %q: %v", service, err), http.StatusNotFound)
			return
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			http.Error(w, resp.GetStatus().String(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, resp.GetStatus().String())
	})
	if profiling {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return &HTTPServer{
		lis: lis,
		mux: mux,
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 5 * time.Second,
			ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		},
	}, nil
}

// Handle serves h at pattern (http.ServeMux's patterns) besides the
// metrics and health, e.g. the status page; call it before Serve.
func (s *HTTPServer) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// Addr is the address the server listens on.
func (s *HTTPServer) Addr() net.Addr { return s.lis.Addr() }

// Serve serves until Shutdown, then returns nil.
func (s *HTTPServer) Serve() error {
	if err := s.srv.Serve(s.lis); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}

// Shutdown stops the server, letting a scrape in progress finish until ctx
// ends.
func (s *HTTPServer) Shutdown(ctx context.Context) error {
	return s.srv.Shutdown(ctx)
}
