package validate

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/classifier"
	"github.com/policyd/policyd/internal/policy"
)

func TestClassifyRequest(t *testing.T) {
	t.Parallel()
	long := func(n int) string { return strings.Repeat("a", n) }
	headers := func(n int) map[string]string {
		h := make(map[string]string, n)
		for i := range n {
			h[strings.Repeat("h", i+1)] = "v"
		}
		return h
	}
	tests := []struct {
		name      string
		req       *policydv1.ClassifyRequest
		wantField string // "" means valid
	}{
		{name: "nil request", req: nil, wantField: "failure"},
		{name: "empty failure", req: req(&policydv1.Failure{})},
		{name: "status 100", req: req(&policydv1.Failure{HttpStatus: 100})},
		{name: "status 999", req: req(&policydv1.Failure{HttpStatus: 999})},
		{name: "status 99", req: req(&policydv1.Failure{HttpStatus: 99}), wantField: "failure.http_status"},
		{name: "status 1000", req: req(&policydv1.Failure{HttpStatus: 1000}), wantField: "failure.http_status"},
		{name: "status negative", req: req(&policydv1.Failure{HttpStatus: -1}), wantField: "failure.http_status"},
		{name: "grpc code 16", req: req(&policydv1.Failure{GrpcCode: 16})},
		{name: "grpc code 17", req: req(&policydv1.Failure{GrpcCode: 17}), wantField: "failure.grpc_code"},
		{name: "grpc code negative", req: req(&policydv1.Failure{GrpcCode: -1}), wantField: "failure.grpc_code"},
		{name: "phase mid stream", req: req(&policydv1.Failure{Phase: policydv1.Phase_PHASE_MID_STREAM})},
		{name: "phase 3", req: req(&policydv1.Failure{Phase: 3}), wantField: "failure.phase"},
		{name: "100 headers", req: req(&policydv1.Failure{Headers: headers(100)})},
		{name: "101 headers", req: req(&policydv1.Failure{Headers: headers(101)}), wantField: "failure.headers"},
		{name: "header name 256", req: req(&policydv1.Failure{Headers: map[string]string{long(256): "v"}})},
		{name: "header name 257", req: req(&policydv1.Failure{Headers: map[string]string{long(257): "v"}}), wantField: "failure.headers"},
		{name: "header value 8 KiB", req: req(&policydv1.Failure{Headers: map[string]string{"x": long(8 << 10)}})},
		{name: "header value over 8 KiB", req: req(&policydv1.Failure{Headers: map[string]string{"x": long(8<<10 + 1)}}), wantField: `failure.headers["x"]`},
		{name: "64 causes", req: req(&policydv1.Failure{Causes: make([]*policydv1.Cause, classifier.MaxCauses)})},
		{name: "65 causes", req: req(&policydv1.Failure{Causes: make([]*policydv1.Cause, classifier.MaxCauses+1)}), wantField: "failure.causes"},
		{
			name:      "long cause code",
			req:       req(&policydv1.Failure{Causes: []*policydv1.Cause{{}, {}, {}, {Code: long(8<<10 + 1)}}}),
			wantField: "failure.causes[3].code",
		},
		{name: "message 64 KiB", req: req(&policydv1.Failure{Message: long(64 << 10)})},
		{name: "message over 64 KiB", req: req(&policydv1.Failure{Message: long(64<<10 + 1)}), wantField: "failure.message"},
		{name: "long error_code", req: req(&policydv1.Failure{ErrorCode: long(8<<10 + 1)}), wantField: "failure.error_code"},
		{name: "body over 64 KiB is truncated, not rejected", req: req(&policydv1.Failure{Body: long(classifier.MaxBodyBytes + 1)})},
		{name: "profile", req: &policydv1.ClassifyRequest{Failure: &policydv1.Failure{}, Profile: "agent_cli-2.x"}},
		{name: "profile 64", req: &policydv1.ClassifyRequest{Failure: &policydv1.Failure{}, Profile: long(64)}},
		{name: "profile 65", req: &policydv1.ClassifyRequest{Failure: &policydv1.Failure{}, Profile: long(65)}, wantField: "profile"},
		{name: "profile upper case", req: &policydv1.ClassifyRequest{Failure: &policydv1.Failure{}, Profile: "Default"}, wantField: "profile"},
		{name: "profile slash", req: &policydv1.ClassifyRequest{Failure: &policydv1.Failure{}, Profile: "a/b"}, wantField: "profile"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := ClassifyRequest(tt.req)
			var got string
			if fe, ok := errors.AsType[*FieldError](err); ok {
				got = fe.Field
			} else if err != nil {
				t.Fatalf("error %v is not a *FieldError", err)
			}
			if got != tt.wantField {
				t.Errorf("field = %q, want %q (err %v)", got, tt.wantField, err)
			}
		})
	}
}

func req(f *policydv1.Failure) *policydv1.ClassifyRequest {
	return &policydv1.ClassifyRequest{Failure: f}
}

func TestNextDelayContextIDAndDeadline(t *testing.T) {
	t.Parallel()
	const id = "123e4567-e89b-12d3-a456-426614174000"
	tests := []struct {
		name      string
		req       *policydv1.NextDelayRequest
		wantField string
	}{
		{name: "canonical id", req: &policydv1.NextDelayRequest{Attempt: 1, Failure: &policydv1.Failure{}, ContextId: id}},
		// Forms uuid.Parse takes and the journal refuses.
		{name: "braces", req: &policydv1.NextDelayRequest{Attempt: 1, Failure: &policydv1.Failure{}, ContextId: "{" + id + "}"}, wantField: "context_id"},
		{name: "urn", req: &policydv1.NextDelayRequest{Attempt: 1, Failure: &policydv1.Failure{}, ContextId: "urn:uuid:" + id}, wantField: "context_id"},
		{name: "32 hex", req: &policydv1.NextDelayRequest{Attempt: 1, Failure: &policydv1.Failure{}, ContextId: strings.ReplaceAll(id, "-", "")}, wantField: "context_id"},
		{name: "a past deadline", req: &policydv1.NextDelayRequest{Attempt: 1, Failure: &policydv1.Failure{}, Deadline: timestamppb.New(time.Unix(0, 0))}},
		{name: "year 1 is no deadline", req: &policydv1.NextDelayRequest{Attempt: 1, Failure: &policydv1.Failure{},
			Deadline: timestamppb.New(time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC))}, wantField: "deadline"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			wantFieldErr(t, NextDelayRequest(tt.req, policy.Builtin()), tt.wantField)
		})
	}
}

func TestTextRefusesControlCharacters(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, v string
		ok      bool
	}{{"plain", "openai", true}, {"NUL", "open\x00ai", false}, {"newline", "a\nb", false}, {"long", strings.Repeat("a", 200), false}} {
		if err := Text("provider", tt.v, 128); (err == nil) != tt.ok {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
}

func wantFieldErr(t *testing.T, err error, field string) {
	t.Helper()
	if field == "" {
		if err != nil {
			t.Fatalf("got %v, want valid", err)
		}
		return
	}
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != field {
		t.Fatalf("got %v, want an error naming %s", err, field)
	}
}
