package server

import (
	"context"
	"log/slog"
	"path"
	"strconv"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// callLogLevel is the level of a call's "finished call" line by its code:
// debug for OK, else go-grpc-middleware's default for servers (info for
// client mistakes such as InvalidArgument, warn for Unavailable and the
// like, error for Internal and Unknown).
func callLogLevel(c codes.Code) logging.Level {
	if c == codes.OK {
		return logging.LevelDebug
	}
	return logging.DefaultServerCodeToLevel(c)
}

// logUnaryCalls logs unary calls to logger. When the logger takes debug
// lines it is go-grpc-middleware's logging interceptor as is (a "started
// call" and a "finished call" line per call). Otherwise only failed calls
// are logged, and by this interceptor, with the library's message and field
// names: the library builds its fields (peer address, start time, method
// names) for every call before the logger can drop them, which measured a
// sixth of the CPU of a whole Classify call. Fields that outer interceptors
// put on the context with logging.InjectFields are logged too.
func logUnaryCalls(logger *slog.Logger) grpc.UnaryServerInterceptor {
	full := logging.UnaryServerInterceptor(slogAdapter(logger),
		logging.WithLogOnEvents(logging.StartCall, logging.FinishCall),
		logging.WithLevels(callLogLevel))
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if logger.Enabled(ctx, slog.LevelDebug) {
			return full(ctx, req, info, handler)
		}
		start := time.Now()
		resp, err := handler(ctx, req)
		if err == nil {
			return resp, nil
		}
		code := status.Code(err)
		lvl := slog.Level(callLogLevel(code))
		if !logger.Enabled(ctx, lvl) {
			return resp, err
		}
		service, method := path.Split(info.FullMethod)
		fields := logging.Fields{
			"protocol", "grpc", "grpc.component", "server",
			"grpc.service", path.Clean(service)[1:], "grpc.method", method, "grpc.method_type", "unary",
		}
		if p, ok := peer.FromContext(ctx); ok {
			fields = append(fields, "peer.address", p.Addr.String())
		}
		fields = fields.WithUnique(logging.ExtractFields(ctx))
		fields = append(fields, "grpc.start_time", start.Format(time.RFC3339), "grpc.code", code.String(),
			"grpc.error", err.Error(), "grpc.time_ms", strconv.FormatFloat(float64(time.Since(start).Microseconds())/1000, 'f', 3, 64))
		logger.Log(ctx, lvl, "finished call", fields...)
		return resp, err
	}
}
