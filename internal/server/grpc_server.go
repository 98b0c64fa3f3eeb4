package server

import (
	"context"
	"log/slog"
	"runtime/debug"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

// NewGRPCServer returns a grpc.Server serving ps, the standard
// grpc.health.v1 health service and server reflection (so that
// `grpcurl -plaintext ADDR list` works), and the health server, which
// reports SERVING for "" and "policyd.v1.PolicyService" until the caller
// changes it, e.g. with Shutdown before stopping.
//
// Calls pass, outermost first, through: logging to logger (start and
// successful finish at debug; a failed finish at info, warn or error by code,
// with the code and duration), the error-to-status mapping (toStatus), and
// panic recovery, innermost, which logs the panic with its stack and answers
// codes.Internal. opts are appended, so interceptors in them run inside
// recovery: Security.ServerOptions adds authentication, TLS and limits.
//
// Requests are decoded by utf8Codec, so that invalid UTF-8 in a string
// field is INVALID_ARGUMENT naming the field instead of grpc-go's INTERNAL.
func NewGRPCServer(ps *PolicyServer, logger *slog.Logger, opts ...grpc.ServerOption) (*grpc.Server, *health.Server) {
	logOpts := []logging.Option{
		logging.WithLogOnEvents(logging.StartCall, logging.FinishCall),
		logging.WithLevels(func(c codes.Code) logging.Level {
			if c == codes.OK {
				return logging.LevelDebug
			}
			return logging.DefaultServerCodeToLevel(c)
		}),
	}
	recOpts := []recovery.Option{recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		logger.ErrorContext(ctx, "panic in handler", "panic", p, "stack", string(debug.Stack()))
		return status.Error(codes.Internal, "internal error")
	})}
	l := slogAdapter(logger)

	gs := grpc.NewServer(append([]grpc.ServerOption{
		grpc.ChainUnaryInterceptor(
			logging.UnaryServerInterceptor(l, logOpts...),
			statusInterceptor(logger),
			recovery.UnaryServerInterceptor(recOpts...),
		),
		grpc.ChainStreamInterceptor(
			logging.StreamServerInterceptor(l, logOpts...),
			utf8StreamInterceptor(logger),
			recovery.StreamServerInterceptor(recOpts...),
		),
		grpc.ForceServerCodecV2(newUTF8Codec()),
	}, opts...)...)

	policydv1.RegisterPolicyServiceServer(gs, ps)
	// The journal service is always registered, so that without a database
	// its RPCs say how to turn it on (FAILED_PRECONDITION) instead of
	// UNIMPLEMENTED.
	policydv1.RegisterJournalServiceServer(gs, NewJournalServer(ps.journal, ps))
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(policydv1.PolicyService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(policydv1.JournalService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	return gs, hs
}

// slogAdapter lets the logging interceptor write to an slog.Logger.
func slogAdapter(l *slog.Logger) logging.Logger {
	return logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		l.Log(ctx, slog.Level(lvl), msg, fields...)
	})
}
