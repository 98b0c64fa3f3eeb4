package server

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"log/slog"
	"math/rand/v2"

	middleware "github.com/grpc-ecosystem/go-grpc-middleware/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// RequestIDHeader is the metadata key of a call's request id: read from the
// request when the client sends one, and sent back in the response headers
// whenever the call may have log lines to find by it: when the client sent
// it, when the call failed (failed calls are logged), and when the daemon
// logs at debug (every call is). A successful call of a client that sent
// no id leaves no log line at info, so its generated id is not sent: the
// header, encoded by the daemon and decoded by the client on every call,
// measured a sixth of a Classify call's CPU.
const RequestIDHeader = "x-request-id"

// MaxRequestIDLen bounds a client-supplied request id. An id that is
// longer, empty or not printable ASCII (0x21..0x7e) is replaced by a
// generated one, so that whatever a client sends cannot bloat or forge log
// lines.
const MaxRequestIDLen = 128

type requestIDKey struct{}

// RequestID returns the request id of the call ctx belongs to, or "" outside
// a call.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// requestIDOf is the client's request id when it sent a valid one
// (supplied), else a new one.
func requestIDOf(ctx context.Context) (id string, supplied bool) {
	if v := metadata.ValueFromIncomingContext(ctx, RequestIDHeader); len(v) > 0 && validRequestID(v[0]) {
		return v[0], true
	}
	return newRequestID(), false
}

func validRequestID(id string) bool {
	if id == "" || len(id) > MaxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return false
		}
	}
	return true
}

// newRequestID returns 128 random bits in hex. math/rand/v2's global source
// is seeded per process and costs nanoseconds; an id needs to be unique, not
// secret.
func newRequestID() string {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(b[8:], rand.Uint64())
	var out [32]byte
	hex.Encode(out[:], b[:])
	return string(out[:])
}

// requestIDUnaryInterceptor gives the call its request id (RequestID), for
// the logs (requestIDHandler) and, when the call may have log lines, the
// client (see RequestIDHeader).
func requestIDUnaryInterceptor(logger *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		id, supplied := requestIDOf(ctx)
		ctx = context.WithValue(ctx, requestIDKey{}, id)
		resp, err := handler(ctx, req)
		if supplied || err != nil || logger.Enabled(ctx, slog.LevelDebug) {
			_ = grpc.SetHeader(ctx, metadata.MD{RequestIDHeader: []string{id}}) // fails only once headers went out
		}
		return resp, err
	}
}

// requestIDStreamInterceptor is requestIDUnaryInterceptor for streams
// (health watches, reflection), which always send the id: they are few.
func requestIDStreamInterceptor(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	id, _ := requestIDOf(ss.Context())
	_ = ss.SetHeader(metadata.MD{RequestIDHeader: []string{id}})
	w := middleware.WrapServerStream(ss)
	w.WrappedContext = context.WithValue(ss.Context(), requestIDKey{}, id)
	return handler(srv, w)
}

// requestIDHandler adds the call's request_id to every record logged with
// the call's context: the logging interceptor's lines, a mapped Internal
// error, a recovered panic. Records below the logger's level never reach
// Handle, so a call logged at debug costs nothing extra at info.
type requestIDHandler struct{ slog.Handler }

func (h requestIDHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := RequestID(ctx); id != "" {
		r.AddAttrs(slog.String("request_id", id))
	}
	return h.Handler.Handle(ctx, r)
}

func (h requestIDHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return requestIDHandler{h.Handler.WithAttrs(attrs)}
}

func (h requestIDHandler) WithGroup(name string) slog.Handler {
	return requestIDHandler{h.Handler.WithGroup(name)}
}
