package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/policyd/policyd/internal/fleet"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

type fixedRand float64

func (r fixedRand) Float64() float64 { return float64(r) }

var now = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func TestBuiltinProfiles(t *testing.T) {
	t.Parallel()
	p := Builtin()
	want := []string{"agent_cli", "default", "task_runner", "web_fetch"}
	if got := strings.Join(p.ProfileNames(), ","); got != strings.Join(want, ",") {
		t.Fatalf("profiles = %s, want %s", got, strings.Join(want, ","))
	}
	tests := []struct {
		profile, failureType, want string
	}{
		{"default", "RATE_LIMIT", "exponential 1s→1m0s ×2, full jitter, 5 attempts, retry-after +10% +0-10% jitter ≤1m0s, fall back to other_provider"},
		{"default", "OVERLOADED", "exponential 5s→2m0s ×2, full jitter, 5 attempts, retry-after +10% +0-10% jitter ≤1m0s, fall back to other_provider"},
		{"default", "SERVER_ERROR", "exponential 1s→30s ×2, full jitter, 3 attempts, retry-after +10% +0-10% jitter ≤1m0s, fall back to other_provider after 2"},
		{"default", "TIMEOUT", "constant 0s, 2 attempts"},
		{"default", "CONTEXT_TOO_LONG", "no retry"},
		{"default", "AUTH_INVALID", "no retry"},
		{"agent_cli", "SERVER_ERROR", "exponential 5s→30s ×2, ±30% jitter, 10 attempts, retry-after (at least) +0-20% jitter ≤5m0s"},
		{"agent_cli", "INVALID_STREAM", "constant 0s, 2 attempts"},
		{"task_runner", "RATE_LIMIT", "exponential 30s→5m0s ×2, 7 attempts"},
		{"task_runner", "TASK_TRANSIENT", "linear 5s +5s →∞, 4 attempts"},
		{"task_runner", "TASK_FATAL", "no retry"},
		{"web_fetch", "SERVER_ERROR", "exponential 1s→10s ×2, full jitter, 3 attempts, retry-after (at least) ≤10s else clamp"},
	}
	for _, tc := range tests {
		ft, _ := ParseFailureType(tc.failureType)
		if got := p.Profiles[tc.profile].StrategyFor(ft).String(); got != tc.want {
			t.Errorf("%s/%s = %q, want %q", tc.profile, tc.failureType, got, tc.want)
		}
	}
}

func decide(t *testing.T, p *Policy, req *policydv1.NextDelayRequest) *policydv1.Decision {
	t.Helper()
	return p.NextDelay(req, now, fixedRand(0.5))
}

// The seeds' own sequences, replayed in process (the server tests replay
// them again through the RPC).
func TestNextDelaySeedSequences(t *testing.T) {
	t.Parallel()
	p := Builtin()
	rateLimit := &policydv1.Failure{Operation: "task", ErrorCode: "RATE_LIMIT"}
	for i, want := range []time.Duration{30, 60, 120, 240, 300, 300} {
		d := decide(t, p, &policydv1.NextDelayRequest{Failure: rateLimit, Attempt: int32(i + 1), Profile: "task_runner"})
		if d.GetAction() != policydv1.Action_ACTION_RETRY || d.GetDelay().AsDuration() != want*time.Second {
			t.Errorf("task_runner RATE_LIMIT attempt %d: %v %v, want retry after %vs", i+1, d.GetAction(), d.GetDelay().AsDuration(), int(want))
		}
	}
	if d := decide(t, p, &policydv1.NextDelayRequest{Failure: rateLimit, Attempt: 7, Profile: "task_runner"}); d.GetStopReason() != policydv1.StopReason_STOP_REASON_ATTEMPTS_EXHAUSTED {
		t.Errorf("task_runner RATE_LIMIT attempt 7: %v %v, want attempts exhausted", d.GetAction(), d.GetStopReason())
	}

	openai429 := func(retryAfter string) *policydv1.Failure {
		return &policydv1.Failure{Provider: "openai", Operation: "chat", Method: "POST", HttpStatus: 429, Headers: map[string]string{"retry-after": retryAfter}}
	}
	// +10 % padding, and at r=0.5 half of the 0-10 % hint jitter.
	d := decide(t, p, &policydv1.NextDelayRequest{Failure: openai429("7"), Attempt: 1})
	if d.GetAction() != policydv1.Action_ACTION_RETRY || d.GetDelay().AsDuration() != 8050*time.Millisecond {
		t.Errorf("default 429 retry-after 7: %v %v, want retry after 8.05s", d.GetAction(), d.GetDelay().AsDuration())
	}
	d = decide(t, p, &policydv1.NextDelayRequest{Failure: openai429("61"), Attempt: 1})
	if d.GetAction() != policydv1.Action_ACTION_FALL_BACK || d.GetFallback().GetKind() != policydv1.FallbackKind_FALLBACK_KIND_OTHER_PROVIDER ||
		d.GetStopReason() != policydv1.StopReason_STOP_REASON_SERVER_DELAY_ABOVE_CEILING {
		t.Errorf("default 429 retry-after 61: %v %v %v, want fall back to another provider (ceiling)", d.GetAction(), d.GetFallback(), d.GetStopReason())
	}
}

func TestNextDelayStreamRules(t *testing.T) {
	t.Parallel()
	p := Builtin()
	off := false
	on := true
	tests := []struct {
		name     string
		req      *policydv1.NextDelayRequest
		want     policydv1.Action
		wantStop policydv1.StopReason
	}{
		{"invalid stream continued once", &policydv1.NextDelayRequest{Profile: "agent_cli", Attempt: 1, Failure: &policydv1.Failure{ErrorCode: "NO_FINISH_REASON"}},
			policydv1.Action_ACTION_RETRY, 0},
		{"never twice", &policydv1.NextDelayRequest{Profile: "agent_cli", Attempt: 2, Failure: &policydv1.Failure{ErrorCode: "NO_FINISH_REASON"}},
			policydv1.Action_ACTION_STOP, policydv1.StopReason_STOP_REASON_ATTEMPTS_EXHAUSTED},
		{"switched off", &policydv1.NextDelayRequest{Profile: "agent_cli", Attempt: 1, Failure: &policydv1.Failure{ErrorCode: "NO_FINISH_REASON"},
			Options: &policydv1.ClassifyOptions{ContinueOnFailedApiCall: &off}}, policydv1.Action_ACTION_STOP, policydv1.StopReason_STOP_REASON_CONTINUATION_OFF},
		{"switched on explicitly", &policydv1.NextDelayRequest{Profile: "agent_cli", Attempt: 1, Failure: &policydv1.Failure{ErrorCode: "NO_FINISH_REASON"},
			Options: &policydv1.ClassifyOptions{ContinueOnFailedApiCall: &on}}, policydv1.Action_ACTION_RETRY, 0},
		// Seed 000: isRetryableError(error, retryFetchErrors) retries coded
		// network errors whatever the flag; only a generic "fetch failed" needs it.
		{"coded mid-stream without retry_fetch_errors", &policydv1.NextDelayRequest{Profile: "agent_cli", Attempt: 1,
			Failure: &policydv1.Failure{Operation: "chat.stream", Phase: policydv1.Phase_PHASE_MID_STREAM, ErrorCode: "ECONNRESET"}},
			policydv1.Action_ACTION_RETRY, 0},
		{"fetch failed mid-stream without retry_fetch_errors", &policydv1.NextDelayRequest{Profile: "agent_cli", Attempt: 1,
			Failure: &policydv1.Failure{Operation: "chat.stream", Phase: policydv1.Phase_PHASE_MID_STREAM, ErrorName: "TypeError", Message: "fetch failed"}},
			policydv1.Action_ACTION_STOP, policydv1.StopReason_STOP_REASON_NOT_RETRYABLE},
		{"fetch failed mid-stream with retry_fetch_errors", &policydv1.NextDelayRequest{Profile: "agent_cli", Attempt: 1, Options: &policydv1.ClassifyOptions{RetryFetchErrors: true},
			Failure: &policydv1.Failure{Operation: "chat.stream", Phase: policydv1.Phase_PHASE_MID_STREAM, ErrorName: "TypeError", Message: "fetch failed"}},
			policydv1.Action_ACTION_RETRY, 0},
		{"mid-stream with retry_fetch_errors", &policydv1.NextDelayRequest{Profile: "agent_cli", Attempt: 1, Options: &policydv1.ClassifyOptions{RetryFetchErrors: true},
			Failure: &policydv1.Failure{Operation: "chat.stream", Phase: policydv1.Phase_PHASE_MID_STREAM, ErrorCode: "ECONNRESET"}},
			policydv1.Action_ACTION_RETRY, 0},
		{"connect phase left to the request layer", &policydv1.NextDelayRequest{Profile: "agent_cli", Attempt: 1,
			Failure: &policydv1.Failure{Operation: "chat.stream", Phase: policydv1.Phase_PHASE_CONNECT, HttpStatus: 503}},
			policydv1.Action_ACTION_STOP, policydv1.StopReason_STOP_REASON_STREAM_PHASE},
		{"default retries the connect phase", &policydv1.NextDelayRequest{Attempt: 1,
			Failure: &policydv1.Failure{Operation: "chat.stream", Phase: policydv1.Phase_PHASE_CONNECT, HttpStatus: 503}},
			policydv1.Action_ACTION_RETRY, 0},
	}
	for _, tc := range tests {
		d := decide(t, p, tc.req)
		if d.GetAction() != tc.want || d.GetStopReason() != tc.wantStop {
			t.Errorf("%s: %v %v (%s), want %v %v", tc.name, d.GetAction(), d.GetStopReason(), d.GetStopText(), tc.want, tc.wantStop)
		}
	}
}

func TestNextDelaySafetyAndDeadline(t *testing.T) {
	t.Parallel()
	p := Builtin()
	f503 := func(op, method string) *policydv1.Failure {
		return &policydv1.Failure{Operation: op, Method: method, HttpStatus: 503}
	}
	tests := []struct {
		name       string
		req        *policydv1.NextDelayRequest
		wantSafety policydv1.OperationSafety
		want       policydv1.Action
	}{
		{"web GET safe", &policydv1.NextDelayRequest{Profile: "web_fetch", Attempt: 1, Failure: f503("web_fetch", "GET")}, policydv1.OperationSafety_OPERATION_SAFETY_SAFE, policydv1.Action_ACTION_RETRY},
		{"web POST not idempotent", &policydv1.NextDelayRequest{Profile: "web_fetch", Attempt: 1, Failure: f503("web_fetch", "POST")}, policydv1.OperationSafety_OPERATION_SAFETY_IRREVERSIBLE, policydv1.Action_ACTION_STOP},
		{"model POST safe", &policydv1.NextDelayRequest{Attempt: 1, Failure: f503("chat", "POST")}, policydv1.OperationSafety_OPERATION_SAFETY_SAFE, policydv1.Action_ACTION_RETRY},
		{"shell exec irreversible", &policydv1.NextDelayRequest{Attempt: 1, Failure: f503("shell.exec", "")}, policydv1.OperationSafety_OPERATION_SAFETY_IRREVERSIBLE, policydv1.Action_ACTION_STOP},
		{"file write conditional", &policydv1.NextDelayRequest{Attempt: 1, Failure: f503("file.write", "")}, policydv1.OperationSafety_OPERATION_SAFETY_CONDITIONAL, policydv1.Action_ACTION_RETRY},
		{"explicit safety wins", &policydv1.NextDelayRequest{Attempt: 1, Failure: f503("shell.exec", ""), Safety: policydv1.OperationSafety_OPERATION_SAFETY_SAFE}, policydv1.OperationSafety_OPERATION_SAFETY_SAFE, policydv1.Action_ACTION_RETRY},
		{"unknown operation safe", &policydv1.NextDelayRequest{Attempt: 1, Failure: f503("frobnicate", "")}, policydv1.OperationSafety_OPERATION_SAFETY_SAFE, policydv1.Action_ACTION_RETRY},
	}
	for _, tc := range tests {
		d := decide(t, p, tc.req)
		if d.GetSafety() != tc.wantSafety || d.GetAction() != tc.want {
			t.Errorf("%s: %v %v, want %v %v", tc.name, d.GetSafety(), d.GetAction(), tc.wantSafety, tc.want)
		}
	}
	d := decide(t, p, &policydv1.NextDelayRequest{Attempt: 1, Failure: f503("chat", "POST"), Deadline: timestamppb.New(now.Add(time.Second))})
	if d.GetStopReason() != policydv1.StopReason_STOP_REASON_DEADLINE {
		t.Errorf("deadline: %v %v, want stop: deadline", d.GetAction(), d.GetStopReason())
	}
	d = decide(t, p, &policydv1.NextDelayRequest{Attempt: 1, FailureType: policydv1.FailureType_FAILURE_TYPE_CONTEXT_TOO_LONG})
	if d.GetAction() != policydv1.Action_ACTION_FALL_BACK || d.GetFallback().GetKind() != policydv1.FallbackKind_FALLBACK_KIND_LARGER_CONTEXT_MODEL {
		t.Errorf("context too long: %v %v, want fall back to a larger-context model", d.GetAction(), d.GetFallback())
	}
}

func TestCapsFromEnvAndTheirEffect(t *testing.T) {
	t.Parallel()
	env := map[string]string{EnvMaxRetryAttempts: "2", EnvMaxRetryDelay: "3s", EnvMaxProviderRetryAfter: "5000", EnvRetryIrreversible: "true"}
	caps, err := CapsFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if caps != (Caps{MaxAttempts: 2, MaxDelay: 3 * time.Second, MaxRetryAfter: 5 * time.Second, RetryIrreversible: true}) {
		t.Errorf("caps = %+v", caps)
	}
	p, err := Parse(nil, "", caps)
	if err != nil {
		t.Fatal(err)
	}
	f := &policydv1.Failure{Operation: "chat", HttpStatus: 429, Headers: map[string]string{"retry-after": "7"}}
	if d := decide(t, p, &policydv1.NextDelayRequest{Failure: f, Attempt: 1}); d.GetAction() != policydv1.Action_ACTION_FALL_BACK {
		t.Errorf("retry-after 7 above a 5 s env ceiling: %v, want fall back", d.GetAction())
	}
	f.Headers = nil
	if d := decide(t, p, &policydv1.NextDelayRequest{Failure: f, Attempt: 2}); d.GetStopReason() != policydv1.StopReason_STOP_REASON_ATTEMPTS_EXHAUSTED {
		t.Errorf("attempt 2 under a cap of 2: %v", d.GetStopReason())
	}
	shell := &policydv1.Failure{Operation: "shell.exec", HttpStatus: 503}
	if d := decide(t, p, &policydv1.NextDelayRequest{Failure: shell, Attempt: 1}); d.GetAction() != policydv1.Action_ACTION_RETRY || d.GetDelay().AsDuration() > 3*time.Second {
		t.Errorf("irreversible allowed, delay capped at 3s: %v %v", d.GetAction(), d.GetDelay().AsDuration())
	}
	for _, bad := range []map[string]string{{EnvMaxRetryAttempts: "-1"}, {EnvMaxRetryDelay: "soon"}, {EnvRetryIrreversible: "maybe"}} {
		var name string
		for k := range bad {
			name = k
		}
		if _, err := CapsFromEnv(func(k string) string { return bad[k] }); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("bad %s: error %v should name it", name, err)
		}
	}
}

func TestPolicyFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	doc := `
profiles:
  fast:
    extends: default
    description: quick retries
    strategies:
      SERVER_ERROR: {retry: true, max_attempts: 9, backoff: constant, initial_delay: 2s}
  task_runner:
    strategies:
      TASK_TRANSIENT: {retry: true, max_attempts: 2, backoff: constant, initial_delay: 1s}
rules:
  - id: acme.busy
    when: [{provider: [acme], text: [reactor busy]}]
    type: OVERLOADED
    retryable: true
    recovery: Wait for the reactor.
`
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := Load(path, func(string) string { return "" })
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	fast := p.Profiles["fast"]
	if fast == nil || fast.Source != path || fast.Description != "quick retries" {
		t.Fatalf("fast profile: %+v", fast)
	}
	d := decide(t, p, &policydv1.NextDelayRequest{Profile: "fast", Attempt: 1, Failure: &policydv1.Failure{Operation: "chat", HttpStatus: 500}})
	if d.GetDelay().AsDuration() != 2*time.Second {
		t.Errorf("fast SERVER_ERROR delay %v, want 2s", d.GetDelay().AsDuration())
	}
	d = decide(t, p, &policydv1.NextDelayRequest{Profile: "fast", Attempt: 1, Failure: &policydv1.Failure{Operation: "chat", HttpStatus: 429, Headers: map[string]string{"retry-after": "7"}}})
	if d.GetDelay().AsDuration() != 8050*time.Millisecond {
		t.Errorf("fast inherits default's RATE_LIMIT: %v", d.GetDelay().AsDuration())
	}
	tr := p.Profiles["task_runner"]
	if tr.StrategyFor(policydv1.FailureType_FAILURE_TYPE_TASK_TRANSIENT).MaxAttempts != 2 || tr.StrategyFor(policydv1.FailureType_FAILURE_TYPE_RATE_LIMIT).MaxAttempts != 7 {
		t.Errorf("overriding one strategy of a built-in profile should keep the others")
	}
	d = decide(t, p, &policydv1.NextDelayRequest{Attempt: 1, Failure: &policydv1.Failure{Provider: "acme", Message: "Reactor busy"}})
	if d.GetClassification().GetRule() != "acme.busy" || d.GetAction() != policydv1.Action_ACTION_RETRY {
		t.Errorf("file rule: %v %v", d.GetClassification().GetRule(), d.GetAction())
	}
}

func TestBadPolicyFileNamesLineAndField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{"bad duration", "profiles:\n  x:\n    default: {retry: true, max_attempts: 3, initial_delay: soon}\n",
			[]string{"p.yaml:3", "profiles.x.default.initial_delay", `"soon"`}},
		{"bad type", "profiles:\n  x:\n    strategies:\n      SLOWNESS: {retry: false}\n", []string{"p.yaml:4", "profiles.x.strategies", `"SLOWNESS"`}},
		{"unknown strategy field", "profiles:\n  x:\n    default:\n      retry: true\n      max_attempts: 2\n      colour: red\n", []string{"p.yaml:6", "profiles.x.default.colour"}},
		{"unknown profile field", "profiles:\n  x:\n    retries: 3\n", []string{"p.yaml:3", "profiles.x.retries"}},
		{"invalid strategy", "profiles:\n  x:\n    default: {retry: true, max_attempts: 0}\n", []string{"p.yaml:3", "profiles.x.default.max_attempts"}},
		{"bad jitter", "profiles:\n  x:\n    default: {retry: true, max_attempts: 2, jitter: wobbly}\n", []string{"p.yaml:3", "jitter", `"wobbly"`}},
		{"bad extends", "profiles:\n  x:\n    extends: nope\n", []string{"p.yaml:3", "extends", `"nope"`}},
		{"bad profile name", "profiles:\n  Bad Name:\n    default: {retry: false}\n", []string{"p.yaml:3", "profiles.Bad Name"}},
		{"unknown top-level", "profile:\n  x: {}\n", []string{"p.yaml:1", `"profile"`}},
		{"bad rule", "rules:\n  - id: r\n    when: [{status: [\"5xx\"]}]\n    type: SERVER_ERROR\n    recovery: x\n", []string{"p.yaml:3", "when[0].status"}},
		{"not yaml", "profiles: [", []string{"p.yaml"}},
		{"bad fleet field", "fleet:\n  breaker:\n    min_volume: 20\n    colour: red\n", []string{"p.yaml:4", "fleet.breaker.colour"}},
		{"bad fleet value", "fleet:\n  retry_budget: {floor: 0}\n", []string{"p.yaml:2", "fleet: retry_budget.floor"}},
		{"bad fleet duration", "fleet:\n  stop: {for: forever}\n", []string{"p.yaml:2", "fleet.stop.for", `"forever"`}},
		{"bad scope", "fleet:\n  scopes: {quota: [provider]}\n", []string{"p.yaml:2", `"quota"`}},
		{"bad scope field", "fleet:\n  scopes:\n    rate_limit: [provider, region]\n", []string{"p.yaml:3", `"region"`}},
		{"scope without provider", "fleet:\n  scopes: {auth: [key]}\n", []string{"scopes.auth", "provider"}},
		{"in-flight cap not a mapping", "fleet:\n  max_in_flight: 64\n", []string{"p.yaml:2", "fleet.max_in_flight", "mapping"}},
		{"in-flight cap not a number", "fleet:\n  max_in_flight:\n    vllm/llama-3-70b: many\n", []string{"p.yaml:3", "fleet.max_in_flight.vllm/llama-3-70b"}},
		{"in-flight cap of 0", "fleet:\n  max_in_flight: {vllm: 0}\n", []string{"p.yaml:2", "max_in_flight.vllm", "not within 1"}},
		{"in-flight cap on a path", "fleet:\n  max_in_flight: {a/b/c: 4}\n", []string{"max_in_flight.a/b/c", "provider or provider/model"}},
		{"bad profile fleet", "profiles:\n  x:\n    fleet: sometimes\n", []string{"p.yaml:3", "profiles.x.fleet", `"sometimes"`}},
		{"bad learned_fallback", "profiles:\n  x:\n    learned_fallback: maybe\n", []string{"p.yaml:3", "profiles.x.learned_fallback", `"maybe"`}},
		{"bad profile fleet switch", "profiles:\n  x:\n    fleet: {breaker: maybe}\n", []string{"p.yaml:3", "profiles.x.fleet", "breaker"}},
		{"bad chain target", "fallbacks:\n  openai/gpt-4o: [claude]\n", []string{"p.yaml:2", "fallbacks.openai/gpt-4o", `"claude"`}},
		{"bad chain source", "fallbacks:\n  gpt-4o: [anthropic/claude]\n", []string{"p.yaml:2", `"gpt-4o"`}},
		{"empty chain", "context_window_fallbacks:\n  openai/gpt-4o: []\n", []string{"p.yaml:2", "context_window_fallbacks.openai/gpt-4o", "non-empty"}},
		{"chain to itself", "content_policy_fallbacks:\n  openai/gpt-4o: [openai/gpt-4o]\n", []string{"p.yaml:2", "itself"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := refused(t, tc.doc, tc.want)
			// One error type for the file's own sections (the rules' come
			// from the classifier, with the same file:line prefix).
			if pe, ok := errors.AsType[*ParseError](err); !ok && tc.name != "bad rule" {
				t.Errorf("%T is not a *ParseError: %v", err, err)
			} else if ok && pe.File != "p.yaml" {
				t.Errorf("ParseError.File = %q", pe.File)
			}
		})
	}
}

// refused parses doc as p.yaml and fails t unless Parse refuses it with an
// error that mentions every string of want; it returns the error.
func refused(t *testing.T, doc string, want []string) error {
	t.Helper()
	_, err := Parse([]byte(doc), "p.yaml", Caps{})
	if err == nil {
		t.Fatalf("accepted:\n%s", doc)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %q", err, w)
		}
	}
	return err
}

func TestProfileBudgetAndEmptyFile(t *testing.T) {
	t.Parallel()
	p, err := Parse([]byte("profiles:\n  tight:\n    extends: default\n    budget: 10s\n"), "p.yaml", Caps{})
	if err != nil {
		t.Fatal(err)
	}
	f := &policydv1.Failure{Operation: "chat", HttpStatus: 503}
	d := decide(t, p, &policydv1.NextDelayRequest{Profile: "tight", Attempt: 1, Failure: f, Elapsed: durationpb.New(9 * time.Second)})
	if d.GetStopReason() != policydv1.StopReason_STOP_REASON_DEADLINE {
		t.Errorf("9s elapsed of a 10s budget, 503 backoff ≥ 2.5s: %v %v, want stop: deadline", d.GetAction(), d.GetStopReason())
	}
	d = decide(t, p, &policydv1.NextDelayRequest{Profile: "tight", Attempt: 1, Failure: f, Elapsed: durationpb.New(time.Second)})
	if d.GetAction() != policydv1.Action_ACTION_RETRY {
		t.Errorf("1s elapsed: %v, want retry", d.GetAction())
	}
	if _, err := Parse([]byte("  \n"), "p.yaml", Caps{}); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("empty file: %v, want refused", err)
	}
}

func TestStreamPhaseDoesNotHideNotRetryable(t *testing.T) {
	t.Parallel()
	d := decide(t, Builtin(), &policydv1.NextDelayRequest{Profile: "agent_cli", Attempt: 1,
		Failure: &policydv1.Failure{Operation: "chat.stream", Phase: policydv1.Phase_PHASE_CONNECT, HttpStatus: 401}})
	if d.GetStopReason() != policydv1.StopReason_STOP_REASON_NOT_RETRYABLE {
		t.Errorf("connect-phase 401: %v, want not retryable", d.GetStopReason())
	}
}

func TestFleetSectionAndChains(t *testing.T) {
	t.Parallel()
	p, err := Parse([]byte(`
fleet:
  scopes: {rate_limit: [provider, key]}
  hold: {spread: 0.5, max_spread: 10s}
  stop: {for: 2m}
  breaker: {min_volume: 50, min_clients: 5, open_for: 10s, max_open_for: 2m, trip_window: 3s, trip_rate: 0.8}
  retry_budget: {burst: 20, floor: 3}
profiles:
  quiet:
    extends: default
    fleet: off
  holds_only:
    extends: default
    fleet: {breaker: false, retry_budget: false}
fallbacks:
  openai/gpt-4o: [anthropic/claude-sonnet-4-5, openrouter/meta-llama/llama-3.1-70b@or-key]
`), "p.yaml", Caps{})
	if err != nil {
		t.Fatal(err)
	}
	c := p.Fleet
	if c.Stop.For != 2*time.Minute || c.Breaker.MinVolume != 50 || c.Breaker.MinClients != 5 || c.Breaker.Window != 10*time.Second ||
		c.Breaker.TripWindow != 3*time.Second || c.Breaker.TripRate != 0.8 ||
		c.Budget.Burst != 20 || c.Budget.Floor != 3 || c.Hold.Spread != 0.5 || c.Hold.MaxSpread != 10*time.Second {
		t.Fatalf("fleet config = %+v", c)
	}
	if f := c.Scopes[fleet.ScopeRateLimit]; f.Model || !f.Key || !f.Provider {
		t.Fatalf("rate_limit scope = %+v, want provider and key", f)
	}
	if f := c.Scopes[fleet.ScopeAvailability]; !f.Model {
		t.Fatalf("availability scope lost its default: %+v", f)
	}
	if p.Profiles["quiet"].Fleet != (fleet.Switches{}) || p.Profiles["default"].Fleet != fleet.AllOn ||
		p.Profiles["holds_only"].Fleet != (fleet.Switches{Hold: true, Stop: true}) {
		t.Fatalf("switches: quiet %+v, default %+v, holds_only %+v", p.Profiles["quiet"].Fleet, p.Profiles["default"].Fleet, p.Profiles["holds_only"].Fleet)
	}
	chain := p.Chains.Errors["openai/gpt-4o"]
	if len(chain) != 2 || chain[1] != (ChainTarget{Provider: "openrouter", Model: "meta-llama/llama-3.1-70b", KeyID: "or-key"}) {
		t.Fatalf("chain = %+v", chain)
	}
	// Without a fleet section: the defaults.
	if Builtin().Fleet.Breaker.MinVolume != fleet.Defaults().Breaker.MinVolume {
		t.Fatal("built-in policy without the fleet defaults")
	}
}

// A decision on a failure type given without a failure carries the type's
// recovery text from the rules data, not a generic one.
func TestFailureTypeOnlyRecoveryFromRules(t *testing.T) {
	p := Builtin()
	d := p.Decide(&policydv1.NextDelayRequest{FailureType: policydv1.FailureType_FAILURE_TYPE_TIMEOUT, Attempt: 1},
		Call{Now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Rand: fixedRand(0.5), Profile: DefaultProfile})
	want := p.Classifier.TypeText(policydv1.FailureType_FAILURE_TYPE_TIMEOUT).Recovery
	if got := d.GetClassification().GetRecoveryAction(); want == "" || got != want {
		t.Errorf("recovery %q, want the rules data's %q", got, want)
	}
}

// A policy file's types section replaces a type's built-in text.
func TestPolicyTypesOverride(t *testing.T) {
	p, err := Parse([]byte("types:\n  AUTH_INVALID: {recovery: Rotate the key in the vault., manual_action: Rotate the key}\n"), "p.yaml", Caps{})
	if err != nil {
		t.Fatal(err)
	}
	if tt := p.Classifier.TypeText(policydv1.FailureType_FAILURE_TYPE_AUTH_INVALID); tt.ManualAction != "Rotate the key" {
		t.Errorf("AUTH_INVALID text %+v", tt)
	}
	if tt := p.Classifier.TypeText(policydv1.FailureType_FAILURE_TYPE_TIMEOUT); tt.Recovery == "" {
		t.Error("the built-in TIMEOUT text is gone")
	}
	if _, err := Parse([]byte("types:\n  MARTIAN: {recovery: x}\n"), "p.yaml", Caps{}); err == nil || !strings.Contains(err.Error(), "MARTIAN") {
		t.Errorf("an unknown type: %v", err)
	}
}

// breaker.failures, min_volume's earlier name, is still read.
func TestBreakerFailuresStillRead(t *testing.T) {
	p, err := Parse([]byte("fleet:\n  breaker: {failures: 7}\n"), "p.yaml", Caps{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Fleet.Breaker.MinVolume != 7 {
		t.Errorf("min_volume %d, want 7", p.Fleet.Breaker.MinVolume)
	}
}

// A breaker's failure_rate above the trip's default rate (0.8) needs no
// trip settings of its own: the two rates are independent.
func TestBreakerFailureRateAboveTheTripRate(t *testing.T) {
	t.Parallel()
	p, err := Parse([]byte("fleet:\n  breaker: {failure_rate: 0.95}\n"), "p.yaml", Caps{})
	if err != nil {
		t.Fatalf("a failure_rate of 0.95: %v", err)
	}
	if b := p.Fleet.Breaker; b.FailureRate != 0.95 || b.TripRate != fleet.Defaults().Breaker.TripRate {
		t.Fatalf("breaker = %+v", b)
	}
}
