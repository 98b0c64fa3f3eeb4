package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/policy"
	"github.com/policyd/policyd/internal/validate"
)

// Request fuzzing: arbitrary wire bytes decoded as a request, then
// validated and answered by the handler. A request either decodes and gets
// an answer or a *validate.FieldError (INVALID_ARGUMENT) — never a panic and never
// another error, which the client would see as INTERNAL.

func addSeeds(f *testing.F, msgs ...proto.Message) {
	for _, m := range msgs {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

func checkHandlerError(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if _, ok := errors.AsType[*validate.FieldError](err); !ok {
		t.Fatalf("error %v (%T) is not a *validate.FieldError", err, err)
	}
}

// FuzzValidateClassifyRequest fuzzes validate.ClassifyRequest and Classify.
func FuzzValidateClassifyRequest(f *testing.F) {
	addSeeds(f,
		&policydv1.ClassifyRequest{Failure: &policydv1.Failure{HttpStatus: 429, Headers: map[string]string{"retry-after": "7"}}},
		&policydv1.ClassifyRequest{Failure: &policydv1.Failure{Provider: "openai", Body: `{"error":{"code":"insufficient_quota"}}`,
			Causes: []*policydv1.Cause{{Name: "TypeError", Code: "UND_ERR_SOCKET", Message: "other side closed"}}, Phase: policydv1.Phase_PHASE_MID_STREAM}, Profile: "agent_cli"},
		&policydv1.ClassifyRequest{Failure: &policydv1.Failure{HttpStatus: 1000, GrpcCode: 99}, Profile: "NO"},
	)
	ps := NewPolicyServer(policy.Builtin())
	f.Fuzz(func(t *testing.T, b []byte) {
		var req policydv1.ClassifyRequest
		if proto.Unmarshal(b, &req) != nil {
			return
		}
		verr := validate.ClassifyRequest(&req)
		resp, err := ps.Classify(context.Background(), &req)
		checkHandlerError(t, err)
		if (verr == nil) != (err == nil) {
			t.Fatalf("ValidateClassifyRequest says %v, Classify %v", verr, err)
		}
		if err == nil && resp.GetClassification().GetRule() == "" {
			t.Fatalf("no rule for a valid request")
		}
	})
}

// FuzzValidateNextDelayRequest fuzzes validate.NextDelayRequest and
// NextDelay (without a journal).
func FuzzValidateNextDelayRequest(f *testing.F) {
	addSeeds(f,
		&policydv1.NextDelayRequest{Failure: &policydv1.Failure{HttpStatus: 503}, Attempt: 1},
		&policydv1.NextDelayRequest{FailureType: policydv1.FailureType_FAILURE_TYPE_RATE_LIMIT, Attempt: 3, Profile: "agent_cli",
			Elapsed: durationpb.New(90e9), ContextId: "8a3c5c1e-3a5e-4a8c-9b1e-0c9f6a1d2b3c"},
		&policydv1.NextDelayRequest{FailureType: 999, Attempt: -1, Elapsed: &durationpb.Duration{Seconds: -1, Nanos: 5}, ContextId: "x"},
	)
	ps := NewPolicyServer(policy.Builtin())
	f.Fuzz(func(t *testing.T, b []byte) {
		var req policydv1.NextDelayRequest
		if proto.Unmarshal(b, &req) != nil {
			return
		}
		verr := validate.NextDelayRequest(&req, policy.Builtin())
		resp, err := ps.NextDelay(context.Background(), &req)
		checkHandlerError(t, err)
		if (verr == nil) != (err == nil) {
			t.Fatalf("ValidateNextDelayRequest says %v, NextDelay %v", verr, err)
		}
		if err == nil && resp.GetDecision().GetDelay().AsDuration() < 0 {
			t.Fatalf("negative delay %v", resp.GetDecision().GetDelay().AsDuration())
		}
	})
}

// FuzzUTF8Codec fuzzes utf8Codec's decoding of requests: it decodes what
// proto.Unmarshal decodes, alike, and a request that fails proto.Unmarshal
// only for invalid UTF-8 decodes marked with the bad field.
func FuzzUTF8Codec(f *testing.F) {
	addSeeds(f,
		&policydv1.ClassifyRequest{Failure: &policydv1.Failure{Message: "PLACEHOLDER", Headers: map[string]string{"a": "b"},
			Causes: []*policydv1.Cause{{Code: "c"}}}, Profile: "p"},
	)
	f.Add([]byte("\x0a\x0d\x3a\x0bPLACEHOLDE\xff"))
	f.Add(protowire.AppendString(protowire.AppendTag(nil, utf8MarkField, protowire.BytesType), "x\x00y"))
	codec := newUTF8Codec()
	f.Fuzz(func(t *testing.T, b []byte) {
		var want policydv1.ClassifyRequest
		wantErr := proto.Unmarshal(b, &want)
		var got policydv1.ClassifyRequest
		err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &got)
		if wantErr == nil {
			if err != nil || !proto.Equal(&got, &want) {
				t.Fatalf("codec: %v, %v; proto.Unmarshal: %v", err, &got, &want)
			}
			return
		}
		if err != nil {
			return // still an unmarshal error: grpc-go answers it
		}
		fe, ok := errors.AsType[*validate.FieldError](invalidUTF8(&got))
		if !ok || fe.Field == "" {
			t.Fatalf("decoded a bad request (%v) without a mark: %v", wantErr, invalidUTF8(&got))
		}
	})
}

// FuzzCoordinateReport fuzzes a Coordinate message's validation and what
// the stream does with a valid one: the fleet applies its usages and
// answers each target's assignment.
func FuzzCoordinateReport(f *testing.F) {
	addSeeds(f,
		&policydv1.CoordinateRequest{ClientId: "a", Usage: []*policydv1.BucketUsage{{Target: &policydv1.BucketTarget{Provider: "openai", Model: "gpt-4o", KeyId: "k"},
			Elapsed: durationpb.New(1e9), Admitted: 3, Shed: 1, Succeeded: 2, Failed: 1, Retries: 1,
			RateLimitHeaders: map[string]string{"x-ratelimit-limit-requests": "600"}}}},
		&policydv1.CoordinateRequest{Usage: []*policydv1.BucketUsage{{Target: &policydv1.BucketTarget{}, Elapsed: &durationpb.Duration{Seconds: -1}}}},
	)
	fl := fleet.New(fleet.Defaults())
	f.Fuzz(func(t *testing.T, b []byte) {
		var req policydv1.CoordinateRequest
		if proto.Unmarshal(b, &req) != nil {
			return
		}
		for _, first := range []bool{true, false} {
			if err := validate.CoordinateRequest(&req, first); err != nil {
				checkHandlerError(t, err)
				continue
			}
			for i, u := range req.GetUsage() {
				if err := validate.Usage(i, u, 0); err != nil {
					checkHandlerError(t, err)
					break
				}
				tg := fleet.Target{Provider: u.GetTarget().GetProvider(), Model: u.GetTarget().GetModel(), KeyID: u.GetTarget().GetKeyId()}
				fl.Report(fleet.Usage{Target: tg, ClientID: req.GetClientId(), Admitted: int64(u.GetAdmitted()), Shed: int64(u.GetShed()),
					Succeeded: int64(u.GetSucceeded()), Failed: int64(u.GetFailed()), Retries: int64(u.GetRetries()),
					RequestsPerMinute: fleet.ReadLimits(tg.Provider, u.GetRateLimitHeaders(), time.Now()).RequestsPerMinute})
				if a := fl.Assign(tg, req.GetClientId()); a.AdmitFraction < 0 || a.AdmitFraction > 1 || a.Hold < 0 {
					t.Fatalf("assignment %+v", a)
				}
			}
		}
	})
}
