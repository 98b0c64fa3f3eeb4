package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/policyd/policyd/internal/auth"
	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/journal"
	"github.com/policyd/policyd/internal/validate"
)

// NotFoundError is a request for something that does not exist, e.g. an
// unknown profile in GetProfile. Its message is shown to the client.
type NotFoundError struct{ msg string }

// Error returns the message, e.g. `profile "x" not found; known: default`.
func (e *NotFoundError) Error() string { return e.msg }

func notFoundf(format string, args ...any) *NotFoundError {
	return &NotFoundError{msg: fmt.Sprintf(format, args...)}
}

// toStatus turns a handler error into the status a client sees; it is the
// only place errors become gRPC codes.
//
//   - a *validate.FieldError becomes codes.InvalidArgument naming the field, with an
//     errdetails.BadRequest FieldViolation detail;
//   - a *NotFoundError becomes codes.NotFound with its message;
//   - journal errors: *journal.InvalidError is InvalidArgument naming the
//     field, journal.ErrNotFound NotFound, journal.ErrUnavailable
//     Unavailable, ErrJournalOff FailedPrecondition saying how to turn it on;
//   - ErrFleetOff is FailedPrecondition too;
//   - an auth.ErrUnauthenticated becomes codes.Unauthenticated with its
//     message (which never contains a token);
//   - ErrNotAdmin becomes codes.PermissionDenied;
//   - a *RateLimitedError, or a *fleet.LimitError (a tenant over one of
//     its fleet limits), becomes codes.ResourceExhausted, and the call's
//     trailer gets grpc-retry-pushback-ms, the gRPC retry spec's server
//     pushback, in whole milliseconds;
//   - a context error becomes codes.Canceled or codes.DeadlineExceeded;
//   - an error that already is a status passes through;
//   - anything else is logged and becomes codes.Internal with no internals.
func toStatus(ctx context.Context, logger *slog.Logger, method string, err error) error {
	if err == nil {
		return nil
	}
	if fe, ok := errors.AsType[*validate.FieldError](err); ok {
		st := status.New(codes.InvalidArgument, fe.Error())
		if d, derr := st.WithDetails(&errdetails.BadRequest{
			FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: fe.Field, Description: fe.Description}},
		}); derr == nil {
			st = d
		}
		return st.Err()
	}
	if nf, ok := errors.AsType[*NotFoundError](err); ok {
		return status.Error(codes.NotFound, nf.Error())
	}
	if ie, ok := errors.AsType[*journal.InvalidError](err); ok {
		return toStatus(ctx, logger, method, &validate.FieldError{Field: ie.Field, Description: ie.Description})
	}
	if rl, ok := errors.AsType[*RateLimitedError](err); ok {
		pushback(ctx, rl.RetryIn)
		return status.Error(codes.ResourceExhausted, rl.Error())
	}
	if le, ok := errors.AsType[*fleet.LimitError](err); ok {
		pushback(ctx, le.RetryIn)
		return status.Error(codes.ResourceExhausted, le.Error())
	}
	switch {
	case errors.Is(err, auth.ErrUnauthenticated):
		return status.Error(codes.Unauthenticated, err.Error())
	case errors.Is(err, ErrNotAdmin):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, ErrJournalOff), errors.Is(err, ErrFleetOff):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, journal.ErrNotFound):
		return status.Error(codes.NotFound, "context not found")
	case errors.Is(err, journal.ErrUnavailable):
		return status.Error(codes.Unavailable, "the journal database is unavailable; retry later (recording is idempotent)")
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	logger.ErrorContext(ctx, "internal error", "grpc.method", method, "error", err)
	return status.Error(codes.Internal, "internal error")
}

// pushback sets the call's grpc-retry-pushback-ms trailer, the gRPC retry
// spec's server pushback, in whole milliseconds.
func pushback(ctx context.Context, d time.Duration) {
	ms := (d + time.Millisecond - 1) / time.Millisecond
	_ = grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", strconv.FormatInt(int64(ms), 10)))
}

// statusInterceptor applies toStatus to every unary handler's error, and
// answers a request utf8Codec marked as holding invalid UTF-8 with its
// *validate.FieldError without calling the handler.
func statusInterceptor(logger *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := invalidUTF8(req); err != nil {
			return nil, toStatus(ctx, logger, info.FullMethod, err)
		}
		resp, err := handler(ctx, req)
		if err != nil {
			return nil, toStatus(ctx, logger, info.FullMethod, err)
		}
		return resp, nil
	}
}

// statusStreamInterceptor applies toStatus to every streaming handler's
// error, as statusInterceptor does for unary calls.
func statusStreamInterceptor(logger *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return toStatus(ss.Context(), logger, info.FullMethod, handler(srv, ss))
	}
}
