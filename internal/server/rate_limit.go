package server

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"

	"github.com/policyd/policyd/internal/auth"
)

// RateLimitedError is a call over its tenant's rate limit; toStatus answers
// it RESOURCE_EXHAUSTED with a grpc-retry-pushback-ms trailer of RetryIn.
type RateLimitedError struct {
	Limit   float64
	Burst   int
	RetryIn time.Duration // when the next call would be admitted
}

// Error says the limit and when to retry, e.g. "rate limit of 10 calls per
// second (burst 20) exceeded; retry in 100ms".
func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("rate limit of %g calls per second (burst %d) exceeded; retry in %v", e.Limit, e.Burst, e.RetryIn)
}

// tenantLimiter is a token bucket per tenant. Tenants come from the tokens
// file or client certificates the operator issued, so the map is bounded.
type tenantLimiter struct {
	limit rate.Limit
	burst int
	now   func() time.Time

	mu       sync.RWMutex
	limiters map[string]*rate.Limiter

	// logger, when set, hears of a tenant over its limit, at most once a
	// minute per tenant (loggedAt), with the calls refused since.
	logger   *slog.Logger
	logMu    sync.Mutex
	loggedAt map[string]time.Time
	refused  map[string]int64
}

func newTenantLimiter(perSecond float64, burst int) *tenantLimiter {
	return &tenantLimiter{limit: rate.Limit(perSecond), burst: burst, now: time.Now, limiters: map[string]*rate.Limiter{},
		loggedAt: map[string]time.Time{}, refused: map[string]int64{}}
}

// note logs tenant's refusal, unless it did within the last minute.
func (l *tenantLimiter) note(tenant string, now time.Time) {
	if l.logger == nil {
		return
	}
	l.logMu.Lock()
	l.refused[tenant]++
	at, n := l.loggedAt[tenant], l.refused[tenant]
	log := at.IsZero() || now.Sub(at) >= time.Minute
	if log {
		l.loggedAt[tenant], l.refused[tenant] = now, 0
	}
	l.logMu.Unlock()
	if log {
		l.logger.Warn("tenant over --rate-limit: calls and stream messages refused", "tenant", tenant,
			"limit", float64(l.limit), "burst", l.burst, "refused", n)
	}
}

// admit takes a token from tenant's bucket, or returns a *RateLimitedError
// saying when one will be there.
func (l *tenantLimiter) admit(tenant string) error {
	l.mu.RLock()
	lim := l.limiters[tenant]
	l.mu.RUnlock()
	if lim == nil {
		l.mu.Lock()
		if lim = l.limiters[tenant]; lim == nil {
			lim = rate.NewLimiter(l.limit, l.burst)
			l.limiters[tenant] = lim
		}
		l.mu.Unlock()
	}
	now := l.now()
	if lim.AllowN(now, 1) {
		return nil
	}
	l.note(tenant, now)
	wait := time.Duration((1 - lim.TokensAt(now)) / float64(l.limit) * float64(time.Second))
	return &RateLimitedError{Limit: float64(l.limit), Burst: l.burst, RetryIn: max(wait.Round(time.Millisecond), time.Millisecond)}
}

func (l *tenantLimiter) unary(logger *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if openMethod(info.FullMethod) {
			return handler(ctx, req)
		}
		if err := l.admit(auth.TenantFrom(ctx)); err != nil {
			return nil, toStatus(ctx, logger, info.FullMethod, err)
		}
		return handler(ctx, req)
	}
}

// stream charges a stream once when it opens and once for every message it
// receives: a stream is many calls' worth of work, not one.
func (l *tenantLimiter) stream(logger *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if openMethod(info.FullMethod) {
			return handler(srv, ss)
		}
		tenant := auth.TenantFrom(ss.Context())
		if err := l.admit(tenant); err != nil {
			return toStatus(ss.Context(), logger, info.FullMethod, err)
		}
		return handler(srv, &chargedStream{ServerStream: ss, l: l, tenant: tenant})
	}
}

// chargedStream takes a token of its tenant's for every message received;
// over the limit, RecvMsg fails with the *RateLimitedError, which ends the
// stream RESOURCE_EXHAUSTED with the pushback trailer.
type chargedStream struct {
	grpc.ServerStream
	l      *tenantLimiter
	tenant string
}

func (s *chargedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.l.admit(s.tenant)
}
