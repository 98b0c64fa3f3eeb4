package server

import (
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/policy"
)

const (
	retry    = policydv1.Action_ACTION_RETRY
	stop     = policydv1.Action_ACTION_STOP
	fallBack = policydv1.Action_ACTION_FALL_BACK
)

// nextDelay calls NextDelay and returns the decision, failing the test on an error.
func nextDelay(t *testing.T, client policydv1.PolicyServiceClient, req *policydv1.NextDelayRequest) *policydv1.Decision {
	t.Helper()
	resp, err := client.NextDelay(testContext(t), req)
	if status.Code(err) != codes.OK {
		t.Fatalf("NextDelay: %v", err)
	}
	return resp.GetDecision()
}

// A decision case: anyDelay skips the delay check of a retry.
type decisionCase struct {
	name       string
	req        *policydv1.NextDelayRequest
	wantAction policydv1.Action
	wantDelay  time.Duration
	anyDelay   bool
	wantStop   policydv1.StopReason
	wantFall   policydv1.FallbackKind
}

func (tc decisionCase) check(t *testing.T, d *policydv1.Decision) {
	t.Helper()
	if d.GetAction() != tc.wantAction || d.GetStopReason() != tc.wantStop || d.GetFallback().GetKind() != tc.wantFall {
		t.Errorf("got %v %v fallback %v (%s), want %v %v fallback %v",
			d.GetAction(), d.GetStopReason(), d.GetFallback().GetKind(), d.GetStopText(), tc.wantAction, tc.wantStop, tc.wantFall)
	}
	if tc.wantAction == retry && !tc.anyDelay && d.GetDelay().AsDuration() != tc.wantDelay {
		t.Errorf("delay = %v, want %v", d.GetDelay().AsDuration(), tc.wantDelay)
	}
	if tc.wantAction != retry && d.GetDelay() != nil {
		t.Errorf("delay = %v on %v, want none", d.GetDelay().AsDuration(), d.GetAction())
	}
}

// The seed systems' sequences, replayed through the RPC with jitter draws of 0.5.
func TestNextDelaySeeds(t *testing.T) {
	t.Parallel()
	client := policydv1.NewPolicyServiceClient(startServer(t))
	task := func(code string, attempt int32) *policydv1.NextDelayRequest {
		return &policydv1.NextDelayRequest{Profile: "task_runner", Attempt: attempt, Failure: &policydv1.Failure{Operation: "task", ErrorCode: code}}
	}
	openai429 := func(retryAfter string) *policydv1.NextDelayRequest {
		return &policydv1.NextDelayRequest{Attempt: 1, Failure: &policydv1.Failure{
			Provider: "openai", Operation: "chat", HttpStatus: 429, Headers: map[string]string{"retry-after": retryAfter},
		}}
	}
	agent := func(attempt int32, f *policydv1.Failure, opts *policydv1.ClassifyOptions) *policydv1.NextDelayRequest {
		return &policydv1.NextDelayRequest{Profile: "agent_cli", Attempt: attempt, Failure: f, Options: opts}
	}
	invalidStream := &policydv1.Failure{Operation: "chat.stream", ErrorCode: "NO_FINISH_REASON"}
	midStream := &policydv1.Failure{Operation: "chat.stream", Phase: policydv1.Phase_PHASE_MID_STREAM, ErrorCode: "ECONNRESET"}
	connect := &policydv1.Failure{Operation: "chat.stream", Phase: policydv1.Phase_PHASE_CONNECT, ErrorCode: "ECONNRESET"}
	web := func(method string, status, attempt int32, headers map[string]string) *policydv1.NextDelayRequest {
		return &policydv1.NextDelayRequest{Profile: "web_fetch", Attempt: attempt, Failure: &policydv1.Failure{
			Operation: "web_fetch", Method: method, HttpStatus: status, Headers: headers,
		}}
	}
	contextBody := `{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",` +
		`"type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`
	f := false

	tests := []decisionCase{
		// seed 002: task_runner.
		{name: "task RATE_LIMIT 1", req: task("RATE_LIMIT", 1), wantAction: retry, wantDelay: 30 * time.Second},
		{name: "task RATE_LIMIT 2", req: task("RATE_LIMIT", 2), wantAction: retry, wantDelay: 60 * time.Second},
		{name: "task RATE_LIMIT 3", req: task("RATE_LIMIT", 3), wantAction: retry, wantDelay: 120 * time.Second},
		{name: "task RATE_LIMIT 4", req: task("RATE_LIMIT", 4), wantAction: retry, wantDelay: 240 * time.Second},
		{name: "task RATE_LIMIT 5", req: task("RATE_LIMIT", 5), wantAction: retry, wantDelay: 300 * time.Second},
		{name: "task RATE_LIMIT 6", req: task("RATE_LIMIT", 6), wantAction: retry, wantDelay: 300 * time.Second},
		{name: "task RATE_LIMIT 7", req: task("RATE_LIMIT", 7), wantAction: stop, wantStop: policydv1.StopReason_STOP_REASON_ATTEMPTS_EXHAUSTED},
		{name: "task TEST_FAILURE 1", req: task("TEST_FAILURE", 1), wantAction: retry, wantDelay: 5 * time.Second},
		{name: "task TEST_FAILURE 2", req: task("TEST_FAILURE", 2), wantAction: retry, wantDelay: 10 * time.Second},
		{name: "task TEST_FAILURE 3", req: task("TEST_FAILURE", 3), wantAction: retry, wantDelay: 15 * time.Second},
		{name: "task TEST_FAILURE 4", req: task("TEST_FAILURE", 4), wantAction: stop, wantStop: policydv1.StopReason_STOP_REASON_ATTEMPTS_EXHAUSTED},
		{name: "task HOOK_FAILURE", req: task("HOOK_FAILURE", 1), wantAction: stop, wantStop: policydv1.StopReason_STOP_REASON_NOT_RETRYABLE},
		{name: "task REVIEW_REJECTED", req: task("REVIEW_REJECTED", 1), wantAction: stop, wantStop: policydv1.StopReason_STOP_REASON_NOT_RETRYABLE},
		{name: "task BUDGET_EXCEEDED", req: task("BUDGET_EXCEEDED", 1), wantAction: stop, wantStop: policydv1.StopReason_STOP_REASON_NOT_RETRYABLE},
		{name: "task INTERRUPTED", req: task("INTERRUPTED", 1), wantAction: stop, wantStop: policydv1.StopReason_STOP_REASON_NOT_RETRYABLE},

		// seed 004: default.
		// +10 % padding and, at r=0.5, half of the 0-10 % hint jitter; the
		// ceiling is 60 s (the provider SDKs'), above it another provider.
		{name: "openai 429 retry-after 7", req: openai429("7"), wantAction: retry, wantDelay: 8050 * time.Millisecond},
		{name: "openai 429 retry-after 30", req: openai429("30"), wantAction: retry, wantDelay: 34500 * time.Millisecond},
		{
			name: "openai 429 retry-after 61", req: openai429("61"), wantAction: fallBack,
			wantStop: policydv1.StopReason_STOP_REASON_SERVER_DELAY_ABOVE_CEILING, wantFall: policydv1.FallbackKind_FALLBACK_KIND_OTHER_PROVIDER,
		},
		{
			name: "openai context_length_exceeded",
			req: &policydv1.NextDelayRequest{Attempt: 1, Failure: &policydv1.Failure{
				Provider: "openai", Operation: "chat", HttpStatus: 400, Body: contextBody,
			}},
			wantAction: fallBack, wantStop: policydv1.StopReason_STOP_REASON_NOT_RETRYABLE,
			wantFall: policydv1.FallbackKind_FALLBACK_KIND_LARGER_CONTEXT_MODEL,
		},
		{
			name:       "failure_type CONTEXT_TOO_LONG",
			req:        &policydv1.NextDelayRequest{Attempt: 1, FailureType: policydv1.FailureType_FAILURE_TYPE_CONTEXT_TOO_LONG},
			wantAction: fallBack, wantStop: policydv1.StopReason_STOP_REASON_NOT_RETRYABLE,
			wantFall: policydv1.FallbackKind_FALLBACK_KIND_LARGER_CONTEXT_MODEL,
		},
		{
			name: "deadline before the delay",
			req: &policydv1.NextDelayRequest{Attempt: 1, Deadline: timestamppb.New(testNow.Add(time.Second)),
				Failure: &policydv1.Failure{Provider: "openai", Operation: "chat", HttpStatus: 503}},
			wantAction: stop, wantStop: policydv1.StopReason_STOP_REASON_DEADLINE,
		},

		// seeds 000 and 001: agent_cli.
		{name: "invalid stream 1", req: agent(1, invalidStream, nil), wantAction: retry, wantDelay: 0},
		{name: "invalid stream 2", req: agent(2, invalidStream, nil), wantAction: stop, wantStop: policydv1.StopReason_STOP_REASON_ATTEMPTS_EXHAUSTED},
		{
			name: "invalid stream, continuation off", req: agent(1, invalidStream, &policydv1.ClassifyOptions{ContinueOnFailedApiCall: &f}),
			wantAction: stop, wantStop: policydv1.StopReason_STOP_REASON_CONTINUATION_OFF,
		},
		// seed 000: isRetryableError(error, retryFetchErrors) retries a coded
		// network error whatever the flag.
		{name: "mid-stream ECONNRESET", req: agent(1, midStream, nil), wantAction: retry, wantDelay: time.Second},
		{
			name: "mid-stream ECONNRESET with retry_fetch_errors", req: agent(1, midStream, &policydv1.ClassifyOptions{RetryFetchErrors: true}),
			wantAction: retry, wantDelay: time.Second,
		},
		{name: "connect ECONNRESET", req: agent(1, connect, nil), wantAction: stop, wantStop: policydv1.StopReason_STOP_REASON_STREAM_PHASE},

		// seed 003: web_fetch (full jitter at 0.5 halves the backoff).
		{name: "GET 503 1", req: web("GET", 503, 1, nil), wantAction: retry, wantDelay: 500 * time.Millisecond},
		{name: "GET 503 2", req: web("GET", 503, 2, nil), wantAction: retry, wantDelay: time.Second},
		{name: "GET 503 3", req: web("GET", 503, 3, nil), wantAction: stop, wantStop: policydv1.StopReason_STOP_REASON_ATTEMPTS_EXHAUSTED},
		{name: "POST 503", req: web("POST", 503, 1, nil), wantAction: stop, wantStop: policydv1.StopReason_STOP_REASON_IRREVERSIBLE_OPERATION},
		{name: "GET 429 retry-after 5", req: web("GET", 429, 1, map[string]string{"retry-after": "5"}), wantAction: retry, wantDelay: 5 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.check(t, nextDelay(t, client, tc.req))
		})
	}
}

func TestNextDelayDetails(t *testing.T) {
	t.Parallel()
	client := policydv1.NewPolicyServiceClient(startServer(t))

	t.Run("401 stops with the recovery action", func(t *testing.T) {
		t.Parallel()
		d := nextDelay(t, client, &policydv1.NextDelayRequest{Attempt: 1, Failure: &policydv1.Failure{Provider: "openai", Operation: "chat", HttpStatus: 401}})
		if d.GetAction() != stop || d.GetStopReason() != policydv1.StopReason_STOP_REASON_NOT_RETRYABLE {
			t.Fatalf("got %v %v, want stop not retryable", d.GetAction(), d.GetStopReason())
		}
		ra := d.GetClassification().GetRecoveryAction()
		if ra == "" || !strings.Contains(d.GetStopText(), ra) {
			t.Errorf("stop_text %q does not contain the recovery action %q", d.GetStopText(), ra)
		}
	})
	t.Run("invalid stream carries the continuation prompt", func(t *testing.T) {
		t.Parallel()
		d := nextDelay(t, client, &policydv1.NextDelayRequest{Profile: "agent_cli", Attempt: 1,
			Failure: &policydv1.Failure{ErrorName: "InvalidStreamError"}})
		if got := d.GetClassification().GetContinuationPrompt(); got != "Please continue." {
			t.Errorf("continuation_prompt = %q, want %q", got, "Please continue.")
		}
	})
	t.Run("strategy and safety", func(t *testing.T) {
		t.Parallel()
		d := nextDelay(t, client, &policydv1.NextDelayRequest{Attempt: 1, ContextId: "0b9e6f6e-4a8e-4d8e-9d43-6c1f0a7e2b11",
			Failure: &policydv1.Failure{Provider: "openai", Operation: "chat", HttpStatus: 429}})
		if d.GetStrategy().GetName() != "default/RATE_LIMIT" || d.GetStrategy().GetSummary() == "" {
			t.Errorf("strategy = %v, want default/RATE_LIMIT with a summary", d.GetStrategy())
		}
		if d.GetSafety() != policydv1.OperationSafety_OPERATION_SAFETY_SAFE || d.GetAttemptsLeft() != 4 || d.GetJournaled() {
			t.Errorf("safety %v, attempts_left %d, journaled %v; want SAFE, 4, false", d.GetSafety(), d.GetAttemptsLeft(), d.GetJournaled())
		}
	})
}

// lockedRand makes a math/rand/v2 source safe for parallel requests.
type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func (l *lockedRand) Float64() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Float64()
}

// Seed 000: agent_cli retries a 503 nine times, 5 s doubling up to 30 s with
// ±30 % jitter and never above 30 s; the tenth attempt stops.
func TestNextDelayAgentCLIJitter(t *testing.T) {
	t.Parallel()
	rnd := &lockedRand{r: rand.New(rand.NewChaCha8([32]byte{7}))}
	client := policydv1.NewPolicyServiceClient(startPolicyServer(t, NewPolicyServer(policy.Builtin(),
		WithClock(func() time.Time { return testNow }), WithRand(rnd))))
	f := &policydv1.Failure{Operation: "chat", HttpStatus: 503}
	for round := range 20 {
		for n := int32(1); n <= 9; n++ {
			d := nextDelay(t, client, &policydv1.NextDelayRequest{Profile: "agent_cli", Attempt: n, Failure: f})
			base := min(30*time.Second, 5*time.Second<<(n-1))
			lo, hi := time.Duration(float64(base)*0.7)-time.Nanosecond, min(30*time.Second, time.Duration(float64(base)*1.3))
			if got := d.GetDelay().AsDuration(); d.GetAction() != retry || got < lo || got > hi {
				t.Fatalf("round %d attempt %d: %v after %v, want retry within [%v, %v]", round, n, d.GetAction(), got, lo, hi)
			}
		}
	}
	d := nextDelay(t, client, &policydv1.NextDelayRequest{Profile: "agent_cli", Attempt: 10, Failure: f})
	if d.GetAction() != stop || d.GetStopReason() != policydv1.StopReason_STOP_REASON_ATTEMPTS_EXHAUSTED {
		t.Errorf("attempt 10: %v %v, want stop attempts exhausted", d.GetAction(), d.GetStopReason())
	}
}

func TestNextDelayInvalidArgument(t *testing.T) {
	t.Parallel()
	client := policydv1.NewPolicyServiceClient(startServer(t))
	rl := &policydv1.Failure{HttpStatus: 429}
	ok := func(mod func(*policydv1.NextDelayRequest)) *policydv1.NextDelayRequest {
		r := &policydv1.NextDelayRequest{Failure: rl, Attempt: 1}
		mod(r)
		return r
	}
	tests := []struct {
		name      string
		req       *policydv1.NextDelayRequest
		wantField string // "" means valid
		wantText  string // in the message, when set
	}{
		{name: "valid", req: ok(func(*policydv1.NextDelayRequest) {})},
		{name: "no failure nor type", req: &policydv1.NextDelayRequest{Attempt: 1}, wantField: "failure", wantText: "give failure or failure_type"},
		{
			name: "both", req: ok(func(r *policydv1.NextDelayRequest) { r.FailureType = policydv1.FailureType_FAILURE_TYPE_RATE_LIMIT }),
			wantField: "failure_type", wantText: "not both",
		},
		{name: "bad failure", req: ok(func(r *policydv1.NextDelayRequest) { r.Failure = &policydv1.Failure{HttpStatus: 42} }), wantField: "failure.http_status"},
		{name: "unknown failure_type", req: &policydv1.NextDelayRequest{FailureType: 99, Attempt: 1}, wantField: "failure_type"},
		{name: "attempt 0", req: ok(func(r *policydv1.NextDelayRequest) { r.Attempt = 0 }), wantField: "attempt", wantText: "at least 1"},
		{name: "attempt -1", req: ok(func(r *policydv1.NextDelayRequest) { r.Attempt = -1 }), wantField: "attempt"},
		{name: "attempt 1000", req: ok(func(r *policydv1.NextDelayRequest) { r.Attempt = 1000 })},
		{name: "attempt 1001", req: ok(func(r *policydv1.NextDelayRequest) { r.Attempt = 1001 }), wantField: "attempt"},
		{name: "known profile", req: ok(func(r *policydv1.NextDelayRequest) { r.Profile = "web_fetch" })},
		{
			name: "unknown profile", req: ok(func(r *policydv1.NextDelayRequest) { r.Profile = "nope" }),
			wantField: "profile", wantText: "agent_cli, default, task_runner, web_fetch",
		},
		{name: "bad profile name", req: ok(func(r *policydv1.NextDelayRequest) { r.Profile = "No/pe" }), wantField: "profile"},
		{name: "negative elapsed", req: ok(func(r *policydv1.NextDelayRequest) { r.Elapsed = durationpb.New(-time.Second) }), wantField: "elapsed"},
		{name: "elapsed 30 days", req: ok(func(r *policydv1.NextDelayRequest) { r.Elapsed = durationpb.New(30 * 24 * time.Hour) })},
		{name: "elapsed over 30 days", req: ok(func(r *policydv1.NextDelayRequest) { r.Elapsed = durationpb.New(31 * 24 * time.Hour) }), wantField: "elapsed"},
		{
			name:      "invalid elapsed",
			req:       ok(func(r *policydv1.NextDelayRequest) { r.Elapsed = &durationpb.Duration{Seconds: 1, Nanos: -1} }),
			wantField: "elapsed",
		},
		{name: "past deadline", req: ok(func(r *policydv1.NextDelayRequest) { r.Deadline = timestamppb.New(testNow.Add(-time.Hour)) })},
		{name: "invalid deadline", req: ok(func(r *policydv1.NextDelayRequest) { r.Deadline = &timestamppb.Timestamp{Nanos: -1} }), wantField: "deadline"},
		{name: "unknown safety", req: ok(func(r *policydv1.NextDelayRequest) { r.Safety = 9 }), wantField: "safety"},
		{name: "uuid context_id", req: ok(func(r *policydv1.NextDelayRequest) { r.ContextId = "6ba7b810-9dad-11d1-80b4-00c04fd430c8" })},
		{name: "bad context_id", req: ok(func(r *policydv1.NextDelayRequest) { r.ContextId = "run-42" }), wantField: "context_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := client.NextDelay(testContext(t), tt.req)
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("NextDelay: %v, want OK", err)
				}
				return
			}
			if got := status.Code(err); got != codes.InvalidArgument {
				t.Fatalf("code = %v, want InvalidArgument (err %v)", got, err)
			}
			if got := violationField(err); got != tt.wantField {
				t.Errorf("BadRequest field = %q, want %q (err %v)", got, tt.wantField, err)
			}
			if msg := status.Convert(err).Message(); !strings.Contains(msg, tt.wantText) {
				t.Errorf("message %q does not contain %q", msg, tt.wantText)
			}
		})
	}
}
