package server

import (
	"context"
	"log/slog"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/journal"
)

// GRPCOption configures NewGRPCServer.
type GRPCOption func(*grpcConfig)

type grpcConfig struct {
	serverOpts    []grpc.ServerOption
	monitorUnary  []grpc.UnaryServerInterceptor
	monitorStream []grpc.StreamServerInterceptor
}

// WithServerOptions passes opts to grpc.NewServer after the server's own
// interceptor chain, so interceptors in them run inside panic recovery and
// see the handler's plain errors.
func WithServerOptions(opts ...grpc.ServerOption) GRPCOption {
	return func(c *grpcConfig) { c.serverOpts = append(c.serverOpts, opts...) }
}

// WithStatsHandler installs h, a gRPC stats handler that sees every call
// from its first byte to its last, e.g. internal/telemetry's tracing.
// Without it none is installed, so a server without tracing pays nothing.
func WithStatsHandler(h stats.Handler) GRPCOption {
	return func(c *grpcConfig) { c.serverOpts = append(c.serverOpts, grpc.StatsHandler(h)) }
}

// WithMonitoring adds interceptors that watch each call from outside the
// error-to-status mapping, so that they see the code the client gets (not
// the handler's plain error) and time the whole call: metrics, e.g.
// internal/metrics. Either may be nil. Without it nothing is installed, so
// a server without metrics pays nothing for them.
func WithMonitoring(unary grpc.UnaryServerInterceptor, stream grpc.StreamServerInterceptor) GRPCOption {
	return func(c *grpcConfig) {
		if unary != nil {
			c.monitorUnary = append(c.monitorUnary, unary)
		}
		if stream != nil {
			c.monitorStream = append(c.monitorStream, stream)
		}
	}
}

// NewGRPCServer returns a grpc.Server serving the three services (ps, js,
// fs), the standard grpc.health.v1 health service and server reflection
// (so that `grpcurl -plaintext ADDR list` works), and the health server.
// It starts nothing in the background: the daemon's composition root runs
// WatchJournal and WatchFleetSync, and the fleet's clock (fleet.Fleet.Run)
// that Coordinate streams tick on.
//
// Health: "" and "policyd.v1.PolicyService" are SERVING (NextDelay answers
// with or without the journal); "policyd.v1.JournalService" follows the
// journal: SERVING while the store is ready, NOT_SERVING while its database
// is down, after the store is closed, or when there is no journal at all
// (set here, and kept current by WatchJournal).
// The caller turns everything NOT_SERVING with Shutdown before stopping,
// which also ends the health Watch streams so they do not hold a graceful
// stop (see Health).
//
// Calls pass, outermost first, through: the request id (RequestID; from the
// client's x-request-id when valid, else generated, and sent back in the
// x-request-id response header when the call may have log lines, see
// RequestIDHeader), logging to logger (start and successful
// finish at debug; below debug only a failed finish, at info, warn or error
// by code, with the code and duration; every line logged with a call's
// context carries its request_id), the WithMonitoring interceptors, the
// error-to-status mapping (toStatus), and panic recovery, innermost, which
// logs the panic with its stack and answers codes.Internal.
// WithServerOptions' interceptors run inside recovery:
// Security.ServerOptions adds authentication, TLS and limits there.
//
// Requests are decoded by utf8Codec, so that invalid UTF-8 in a string
// field is INVALID_ARGUMENT naming the field instead of grpc-go's INTERNAL.
func NewGRPCServer(ps *PolicyServer, js *JournalServer, fs *FleetServer, logger *slog.Logger, opts ...GRPCOption) (*grpc.Server, *Health) {
	var cfg grpcConfig
	for _, o := range opts {
		o(&cfg)
	}
	logger = slog.New(requestIDHandler{logger.Handler()})
	logOpts := []logging.Option{
		logging.WithLogOnEvents(logging.StartCall, logging.FinishCall),
		logging.WithLevels(callLogLevel),
	}
	recOpts := []recovery.Option{recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		logger.ErrorContext(ctx, "panic in handler", "panic", p, "stack", string(debug.Stack()))
		return status.Error(codes.Internal, "internal error")
	})}
	l := slogAdapter(logger)

	unary := []grpc.UnaryServerInterceptor{requestIDUnaryInterceptor(logger), logUnaryCalls(logger)}
	unary = append(unary, cfg.monitorUnary...)
	unary = append(unary, statusInterceptor(logger), recovery.UnaryServerInterceptor(recOpts...))
	stream := []grpc.StreamServerInterceptor{requestIDStreamInterceptor, logging.StreamServerInterceptor(l, logOpts...)}
	stream = append(stream, cfg.monitorStream...)
	stream = append(stream, statusStreamInterceptor(logger), utf8StreamInterceptor(logger), recovery.StreamServerInterceptor(recOpts...))
	gs := grpc.NewServer(append([]grpc.ServerOption{
		// Serve calls on a fixed set of goroutines whose stacks have
		// already grown, instead of a new goroutine per call that grows its
		// stack through the interceptor chain and the classifier every time
		// (measured: a seventh of a Classify's CPU in runtime.newstack).
		// Enough of them for the calls in flight of a busy daemon (grpc-go
		// starts a goroutine for a call when every worker is busy).
		grpc.NumStreamWorkers(uint32(64 * runtime.GOMAXPROCS(0))),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
		grpc.ForceServerCodecV2(newUTF8Codec()),
	}, cfg.serverOpts...)...)

	policydv1.RegisterPolicyServiceServer(gs, ps)
	// The journal service is always registered, so that without a database
	// its RPCs say how to turn it on (FAILED_PRECONDITION) instead of
	// UNIMPLEMENTED.
	policydv1.RegisterJournalServiceServer(gs, js)
	hs := newHealth()
	fs.drain = hs.drain // Coordinate streams end at Shutdown, as health watches do
	policydv1.RegisterFleetServiceServer(gs, fs)
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(policydv1.PolicyService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	setJournalHealth(hs, js.store != nil && js.store.Ready(context.Background()) == nil) // no window in which the service is unknown
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	return gs, hs
}

// setJournalHealth sets policyd.v1.JournalService's health.
func setJournalHealth(hs *Health, ready bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ready {
		st = healthpb.HealthCheckResponse_SERVING
	}
	hs.SetServingStatus(policydv1.JournalService_ServiceDesc.ServiceName, st)
}

// WatchJournal makes the health of policyd.v1.JournalService follow store
// until ctx ends or the store is closed: it is updated whenever the store
// marks its database down or back. Once hs is shut down it ignores the
// updates, so shutdown's NOT_SERVING stays. It returns at once for no
// store (the service stays NOT_SERVING).
func WatchJournal(ctx context.Context, hs *Health, store *journal.Store) {
	if store == nil {
		return
	}
	store.WatchReady(ctx, func(ready bool) { setJournalHealth(hs, ready) })
}

// slogAdapter lets the logging interceptor write to an slog.Logger.
func slogAdapter(l *slog.Logger) logging.Logger {
	return logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		l.Log(ctx, slog.Level(lvl), msg, fields...)
	})
}

// FleetSyncService is the health service that says whether a replica's
// fleet is in step with the others (fleet.Syncer): SERVING while its rounds
// reach the database, NOT_SERVING while it decides from its own state
// alone. The daemon's other services stay SERVING either way: decisions
// never wait on the database.
const FleetSyncService = "policyd.fleet.sync"

// SetFleetSyncHealth sets FleetSyncService's health: up while the
// replica's rounds reach the exchange.
func SetFleetSyncHealth(hs *Health, up bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if up {
		st = healthpb.HealthCheckResponse_SERVING
	}
	hs.SetServingStatus(FleetSyncService, st)
}

// WatchFleetSync makes FleetSyncService follow s every second until ctx
// ends, logging each change. (The syncer's rounds run at least every
// fleet.TickEvery; a second is as fresh as an operator needs.) It assumes
// SERVING at the start (SetFleetSyncHealth).
func WatchFleetSync(ctx context.Context, hs *Health, s *fleet.Syncer, logger *slog.Logger) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	was := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st := s.Stats()
		if st.Rounds == 0 || st.Up == was {
			continue
		}
		was = st.Up
		SetFleetSyncHealth(hs, st.Up)
		if st.Up {
			logger.Info("fleet sync: back in step with the other replicas", "replicas", st.Replicas)
		} else {
			logger.Warn("fleet sync: the database is unreachable; this replica decides from its own state", "error", st.LastError)
		}
	}
}
