package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/classifier"
	"github.com/policyd/policyd/internal/policy"
	"github.com/policyd/policyd/internal/validate"
)

// testNow is the test servers' clock.
var testNow = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

// fixedRand is a jitter source that always draws the same number.
type fixedRand float64

func (r fixedRand) Float64() float64 { return float64(r) }

// startServer serves NewGRPCServer with the built-in policy, the clock
// testNow and jitter draws of 0.5 on 127.0.0.1:0 and returns a client
// connection to it; both stop when the test ends.
func startServer(t *testing.T, opts ...grpc.ServerOption) *grpc.ClientConn {
	t.Helper()
	ps := NewPolicyServer(policy.Builtin(), WithClock(func() time.Time { return testNow }), WithRand(fixedRand(0.5)))
	return startPolicyServer(t, ps, opts...)
}

// startPolicyServer serves ps like startServer.
func startPolicyServer(t *testing.T, ps *PolicyServer, opts ...grpc.ServerOption) *grpc.ClientConn {
	t.Helper()
	return serveTest(t, ps, nil, WithServerOptions(opts...)).conn
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestClassify(t *testing.T) {
	t.Parallel()
	client := policydv1.NewPolicyServiceClient(startServer(t))
	tests := []struct {
		name           string
		req            *policydv1.ClassifyRequest
		wantType       policydv1.FailureType
		wantRetryable  bool
		wantRetryAfter time.Duration
	}{
		{
			name: "429 with retry-after",
			req: &policydv1.ClassifyRequest{Failure: &policydv1.Failure{
				HttpStatus: 429, Headers: map[string]string{"retry-after": "7"},
			}},
			wantType: policydv1.FailureType_FAILURE_TYPE_RATE_LIMIT, wantRetryable: true, wantRetryAfter: 7 * time.Second,
		},
		{
			name: "body over 64 KiB is accepted",
			req: &policydv1.ClassifyRequest{Failure: &policydv1.Failure{
				HttpStatus: 503, Body: strings.Repeat("x", classifier.MaxBodyBytes+1),
			}, Profile: "default"},
			wantType: policydv1.FailureType_FAILURE_TYPE_OVERLOADED, wantRetryable: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			resp, err := client.Classify(testContext(t), tt.req)
			if status.Code(err) != codes.OK {
				t.Fatalf("Classify: %v", err)
			}
			c := resp.GetClassification()
			if c.GetFailureType() != tt.wantType || c.GetRetryable() != tt.wantRetryable {
				t.Errorf("got %v retryable=%v, want %v retryable=%v", c.GetFailureType(), c.GetRetryable(), tt.wantType, tt.wantRetryable)
			}
			if got := c.GetRetryAfter().AsDuration(); got != tt.wantRetryAfter {
				t.Errorf("retry_after = %v, want %v", got, tt.wantRetryAfter)
			}
		})
	}
}

func TestClassifyInvalidArgument(t *testing.T) {
	t.Parallel()
	client := policydv1.NewPolicyServiceClient(startServer(t))
	tests := []struct {
		name      string
		req       *policydv1.ClassifyRequest
		wantField string
	}{
		{name: "missing failure", req: &policydv1.ClassifyRequest{}, wantField: "failure"},
		{name: "bad http_status", req: req(&policydv1.Failure{HttpStatus: 42}), wantField: "failure.http_status"},
		{name: "unknown phase", req: req(&policydv1.Failure{Phase: 99}), wantField: "failure.phase"},
		{name: "too many causes", req: req(&policydv1.Failure{Causes: make([]*policydv1.Cause, classifier.MaxCauses+1)}), wantField: "failure.causes"},
		{
			name:      "oversize header value",
			req:       req(&policydv1.Failure{Headers: map[string]string{"retry-after": strings.Repeat("1", validate.MaxFieldBytes+1)}}),
			wantField: `failure.headers["retry-after"]`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := client.Classify(testContext(t), tt.req)
			if got := status.Code(err); got != codes.InvalidArgument {
				t.Fatalf("code = %v, want InvalidArgument (err %v)", got, err)
			}
			if got := violationField(err); got != tt.wantField {
				t.Errorf("BadRequest field = %q, want %q", got, tt.wantField)
			}
		})
	}
}

// violationField returns the field of err's first BadRequest violation.
func violationField(err error) string {
	for _, d := range status.Convert(err).Details() {
		if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) > 0 {
			return br.GetFieldViolations()[0].GetField()
		}
	}
	return ""
}

func req(f *policydv1.Failure) *policydv1.ClassifyRequest {
	return &policydv1.ClassifyRequest{Failure: f}
}

func TestPanicBecomesInternal(t *testing.T) {
	t.Parallel()
	// A test-only interceptor, run inside recovery, panics on profile "panic".
	panicky := grpc.ChainUnaryInterceptor(func(ctx context.Context, r any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if r.(*policydv1.ClassifyRequest).GetProfile() == "panic" {
			panic("test panic")
		}
		return h(ctx, r)
	})
	client := policydv1.NewPolicyServiceClient(startServer(t, panicky))
	ok := &policydv1.Failure{HttpStatus: 500}
	tests := []struct {
		name     string
		profile  string
		wantCode codes.Code
	}{
		{name: "panic", profile: "panic", wantCode: codes.Internal},
		{name: "still serving", profile: "", wantCode: codes.OK},
	}
	for _, tt := range tests { // in order: the second call follows the panic
		t.Run(tt.name, func(t *testing.T) {
			_, err := client.Classify(testContext(t), &policydv1.ClassifyRequest{Failure: ok, Profile: tt.profile})
			if got := status.Code(err); got != tt.wantCode {
				t.Fatalf("code = %v, want %v (err %v)", got, tt.wantCode, err)
			}
			if tt.wantCode == codes.Internal && strings.Contains(status.Convert(err).Message(), "test panic") {
				t.Errorf("Internal message leaks the panic: %q", status.Convert(err).Message())
			}
		})
	}
}

func TestHealth(t *testing.T) {
	t.Parallel()
	client := healthpb.NewHealthClient(startServer(t))
	tests := []struct {
		name    string
		service string
		want    healthpb.HealthCheckResponse_ServingStatus
	}{
		{name: "server", service: "", want: healthpb.HealthCheckResponse_SERVING},
		{name: "policy service", service: "policyd.v1.PolicyService", want: healthpb.HealthCheckResponse_SERVING},
		{name: "journal service without a journal", service: "policyd.v1.JournalService", want: healthpb.HealthCheckResponse_NOT_SERVING},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			resp, err := client.Check(testContext(t), &healthpb.HealthCheckRequest{Service: tt.service})
			if status.Code(err) != codes.OK {
				t.Fatalf("Check: %v", err)
			}
			if resp.GetStatus() != tt.want {
				t.Errorf("status = %v, want %v", resp.GetStatus(), tt.want)
			}
		})
	}
}
