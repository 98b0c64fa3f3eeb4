package server

import (
	"context"
	"crypto/tls"
	"log/slog"
	"strings"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	grpcauth "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/auth"
)

// Defaults of Security, the values `policyd serve` starts with.
const (
	// DefaultMaxMessageBytes bounds a request: far above a real failure
	// (clients send at most 64 KiB of body) and a quarter of grpc-go's 4 MiB
	// default, so a caller cannot make the server buffer much.
	DefaultMaxMessageBytes = 1 << 20
	// DefaultMaxHeaderBytes bounds a call's metadata, which grpc-go decodes
	// before any interceptor (authentication included) sees the call: a
	// bearer token, a request id and a few tracing headers fit many times
	// over, and grpc-go's own bound (16 MiB) let unauthenticated callers
	// make the server hold over a GiB.
	DefaultMaxHeaderBytes = 64 << 10
	// DefaultMaxConcurrentStreams bounds the calls in flight on one
	// connection; more wait in the client.
	DefaultMaxConcurrentStreams = 1000
	// DefaultRequestTimeout is the deadline of a journal call whose client
	// sent none: a journal call takes milliseconds, so only a stuck one
	// reaches it.
	DefaultRequestTimeout = 30 * time.Second
)

// Keepalive enforcement, not configurable: clients may ping every 15s even
// without calls in flight (grpc-go's default allows one ping per 5 minutes,
// which turns a client keepalive of 30s, common behind load balancers, into
// GOAWAY too_many_pings); one that pings more often gets GOAWAY. The server pings an idle connection after a minute
// and closes it when no answer comes within 20s, so dead peers do not hold
// streams.
const (
	keepaliveMinTime = 15 * time.Second
	keepaliveTime    = time.Minute
	keepaliveTimeout = 20 * time.Second
)

// Security configures authentication, TLS and limits for NewGRPCServer,
// through the options ServerOptions returns. The zero value is no
// authentication, plaintext, grpc-go's message and stream limits, and
// policyd's keepalive enforcement (always on).
type Security struct {
	// Auth authenticates every call except grpc.health.v1 and server
	// reflection, which stay open so that probes and grpcurl list work
	// without a token. nil: no authentication, every caller is the tenant "".
	Auth *auth.Authenticator
	// TLS serves TLS (mutual TLS when it requires client certificates).
	// nil: plaintext.
	TLS *tls.Config
	// MaxMessageBytes bounds a received message (RESOURCE_EXHAUSTED above
	// it); 0 keeps grpc-go's 4 MiB.
	MaxMessageBytes int
	// MaxHeaderBytes bounds a call's metadata (HTTP/2's header list size;
	// a call over it is refused before it is decoded); 0 keeps grpc-go's
	// 16 MiB.
	MaxHeaderBytes int
	// MaxConcurrentStreams bounds the calls in flight per connection; 0 is
	// grpc-go's unlimited.
	MaxConcurrentStreams uint32
	// RequestTimeout is the deadline of a call whose client sent none
	// (PolicyService calls excepted: see deadlineInterceptor); 0 leaves such
	// calls without one.
	RequestTimeout time.Duration
	// RateLimit is each tenant's sustained calls per second (health and
	// reflection not counted), RateBurst how many it may make at once; a call
	// over it answers RESOURCE_EXHAUSTED with a grpc-retry-pushback-ms
	// trailer. 0 or a burst below 1: no rate limit.
	RateLimit float64
	RateBurst int
}

// ServerOptions returns the grpc.ServerOptions that put s in force; pass
// them to NewGRPCServer. Its interceptors run inside panic recovery, in
// this order: the default deadline, authentication, the rate limit. With
// nothing configured they add no interceptor at all, so the hot path pays
// nothing for features that are off.
func (s Security) ServerOptions(logger *slog.Logger) []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: keepaliveTime, Timeout: keepaliveTimeout}),
	}
	if s.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.TLS)))
	}
	if s.MaxMessageBytes > 0 {
		opts = append(opts, grpc.MaxRecvMsgSize(s.MaxMessageBytes))
	}
	if s.MaxHeaderBytes > 0 {
		opts = append(opts, grpc.MaxHeaderListSize(uint32(s.MaxHeaderBytes)))
	}
	if s.MaxConcurrentStreams > 0 {
		opts = append(opts, grpc.MaxConcurrentStreams(s.MaxConcurrentStreams))
	}
	var unary []grpc.UnaryServerInterceptor
	var stream []grpc.StreamServerInterceptor
	if s.RequestTimeout > 0 {
		unary = append(unary, deadlineInterceptor(s.RequestTimeout))
	}
	if s.Auth != nil {
		authn := func(ctx context.Context) (context.Context, error) {
			ctx2, err := s.Auth.Authenticate(ctx)
			if err != nil {
				return nil, toStatus(ctx, logger, "", err)
			}
			return ctx2, nil
		}
		open := selector.MatchFunc(needsAuth)
		unary = append(unary, selector.UnaryServerInterceptor(grpcauth.UnaryServerInterceptor(authn), open))
		stream = append(stream, selector.StreamServerInterceptor(grpcauth.StreamServerInterceptor(authn), open))
	}
	if s.RateLimit > 0 && s.RateBurst >= 1 {
		rl := newTenantLimiter(s.RateLimit, s.RateBurst)
		rl.logger = logger
		unary = append(unary, rl.unary(logger))
		stream = append(stream, rl.stream(logger))
	}
	if len(unary) > 0 {
		opts = append(opts, grpc.ChainUnaryInterceptor(unary...))
	}
	if len(stream) > 0 {
		opts = append(opts, grpc.ChainStreamInterceptor(stream...))
	}
	return opts
}

// policyServicePrefix starts the full method names of PolicyService.
var policyServicePrefix = "/" + policydv1.PolicyService_ServiceDesc.ServiceName + "/"

// needsAuth is the selector of the authentication interceptor; see
// openService.
func needsAuth(_ context.Context, c interceptors.CallMeta) bool { return !openService(c.Service) }

// openService reports whether a service is open to every caller, without
// authentication or rate limit: the health service, so that probes work,
// and server reflection (v1 and v1alpha), so that grpcurl list and describe
// work; both reveal only what the public protos say.
func openService(service string) bool {
	return service == "grpc.health.v1.Health" || strings.HasPrefix(service, "grpc.reflection.")
}

// openMethod is openService of a full method name, "/service/method".
func openMethod(fullMethod string) bool {
	service, _, _ := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	return openService(service)
}

// deadlineInterceptor gives a call whose client sent no deadline one of d,
// except PolicyService calls: they answer from memory, and the one wait in
// them, NextDelay's journal write, has its own bound (the journal timeout).
// Skipping them keeps a timer per call off the hot path.
func deadlineInterceptor(d time.Duration) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if strings.HasPrefix(info.FullMethod, policyServicePrefix) {
			return handler(ctx, req)
		}
		if _, ok := ctx.Deadline(); ok {
			return handler(ctx, req)
		}
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return handler(ctx, req)
	}
}
