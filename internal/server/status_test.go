package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/policyd/policyd/internal/auth"
	"github.com/policyd/policyd/internal/validate"
)

func TestToStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		err       error
		wantCode  codes.Code
		wantField string
	}{
		{name: "nil", err: nil, wantCode: codes.OK},
		{name: "field error", err: validate.Fieldf("failure.http_status", "bad"), wantCode: codes.InvalidArgument, wantField: "failure.http_status"},
		{name: "wrapped field error", err: fmt.Errorf("validate: %w", validate.Fieldf("profile", "bad")), wantCode: codes.InvalidArgument, wantField: "profile"},
		{name: "not found", err: fmt.Errorf("get: %w", notFoundf("profile %q not found", "x")), wantCode: codes.NotFound},
		{name: "canceled", err: context.Canceled, wantCode: codes.Canceled},
		{name: "deadline", err: fmt.Errorf("x: %w", context.DeadlineExceeded), wantCode: codes.DeadlineExceeded},
		{name: "status passes through", err: status.Error(codes.Unavailable, "later"), wantCode: codes.Unavailable},
		{name: "unauthenticated", err: fmt.Errorf("auth: %w", auth.ErrUnauthenticated), wantCode: codes.Unauthenticated},
		{name: "rate limited", err: &RateLimitedError{Limit: 1, Burst: 1, RetryIn: time.Second}, wantCode: codes.ResourceExhausted},
		{name: "unknown error", err: errors.New("secret internals"), wantCode: codes.Internal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := toStatus(t.Context(), slog.New(slog.DiscardHandler), "/test", tt.err)
			if got := status.Code(err); got != tt.wantCode {
				t.Fatalf("code = %v, want %v", got, tt.wantCode)
			}
			if got := violationField(err); got != tt.wantField {
				t.Errorf("BadRequest field = %q, want %q", got, tt.wantField)
			}
			if tt.wantCode == codes.Internal && strings.Contains(status.Convert(err).Message(), "secret") {
				t.Errorf("Internal message leaks the error: %q", status.Convert(err).Message())
			}
		})
	}
}
