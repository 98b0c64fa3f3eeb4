package policy

import (
	"testing"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

// A profile follows a peer's convention through settings, not rule edits:
// a zero hint as "now", a status rule scoped to a provider.
func TestPeerConventionSettings(t *testing.T) {
	t.Parallel()
	doc := `
profiles:
  api_core:
    extends: default
    status_rules:
      - {provider: [google], status: [409], retryable: true}
      - {status: ["408"], retryable: false, type: TIMEOUT}
    strategies:
      SERVER_ERROR: {retry: true, max_attempts: 3, backoff: constant, initial_delay: 1s, honor_retry_after: true, retry_after_zero: now}
  api_core_child:
    extends: api_core
  grpc_svc:
    status_rules:
      - {grpc_code: [ALREADY_EXISTS, "14"], retryable: true}
      - {grpc_code: ["*"], retryable: false}
`
	p, err := Parse([]byte(doc), "policy.yaml", Caps{})
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	tests := []struct {
		name      string
		profile   string
		failure   *policydv1.Failure
		retryable bool
		rule      string
	}{
		{"Google's 409 is retried under the profile", "api_core", &policydv1.Failure{Provider: "google", HttpStatus: 409}, true, "profile.api_core.status_rules[0]"},
		{"another provider's 409 keeps the table's rule", "api_core", &policydv1.Failure{Provider: "openai", HttpStatus: 409}, true, "conflict"},
		{"a profile's own stop", "api_core", &policydv1.Failure{HttpStatus: 408}, false, "profile.api_core.status_rules[1]"},
		{"other profiles are untouched", "default", &policydv1.Failure{HttpStatus: 408}, true, "timeout"},
		{"a profile that extends it inherits its status rules", "api_core_child", &policydv1.Failure{HttpStatus: 408}, false, "profile.api_core_child.status_rules[1]"},
		{"a service config's retryable gRPC code", "grpc_svc", &policydv1.Failure{GrpcCode: 6}, true, "profile.grpc_svc.status_rules[0]"},
		{"a gRPC code the text states", "grpc_svc", &policydv1.Failure{Message: "rpc error: code = Unavailable desc = x"}, true, "profile.grpc_svc.status_rules[0]"},
		{"every other gRPC code is final", "grpc_svc", &policydv1.Failure{GrpcCode: 13}, false, "profile.grpc_svc.status_rules[1]"},
		{"a failure with no gRPC code keeps the table's rule", "grpc_svc", &policydv1.Failure{HttpStatus: 503}, true, "overloaded"},
	}
	for _, tc := range tests {
		cls := p.Classifier.Classify(tc.failure, nil, tc.profile)
		if cls.GetRetryable() != tc.retryable || cls.GetRule() != tc.rule {
			t.Errorf("%s: retryable=%v rule=%q, want %v %q", tc.name, cls.GetRetryable(), cls.GetRule(), tc.retryable, tc.rule)
		}
	}
	d := decide(t, p, &policydv1.NextDelayRequest{Profile: "api_core", Attempt: 1,
		Failure: &policydv1.Failure{Operation: "chat", HttpStatus: 500, Headers: map[string]string{"retry-after": "0"}}})
	if d.GetAction() != policydv1.Action_ACTION_RETRY || d.GetDelay().AsDuration() != 0 {
		t.Errorf("retry_after_zero: now: %v after %v, want retry at once", d.GetAction(), d.GetDelay().AsDuration())
	}
	for _, bad := range []string{
		"profiles: {x: {status_rules: [{status: [409]}]}}",
		"profiles: {x: {status_rules: [{retryable: true}]}}",
		"profiles: {x: {status_rules: [{grpc_code: [SOMETIMES], retryable: true}]}}",
		"profiles: {x: {status_rules: {status: [409]}}}",
		"profiles: {x: {default: {retry_after_zero: soon}}}",
	} {
		if _, err := Parse([]byte(bad), "policy.yaml", Caps{}); err == nil {
			t.Errorf("Parse(%q) = nil error", bad)
		}
	}
}

// learned_fallback answers a failure no rule recognises from the failures it
// resembles in the profiles that turn it on: default and those that extend
// it, unless they turn it off; never in a profile of its own.
func TestLearnedFallbackSetting(t *testing.T) {
	t.Parallel()
	doc := `
profiles:
  child:
    extends: default
  strict:
    extends: default
    learned_fallback: false
  own:
    default: {retry: false}
`
	p, err := Parse([]byte(doc), "policy.yaml", Caps{})
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	f := &policydv1.Failure{Message: "the backend is busy, try later"}
	for profile, want := range map[string]string{"default": "learned", "child": "learned", "strict": "unknown", "own": "unknown", "agent_cli": "unknown"} {
		if got := p.Classifier.Classify(f, nil, profile).GetRule(); got != want {
			t.Errorf("%s: rule %q, want %q", profile, got, want)
		}
		if got := ProfileProto(p.Profiles[profile]).GetLearnedFallback(); got != (want == "learned") {
			t.Errorf("%s: the API's learned_fallback = %v", profile, got)
		}
	}
}
