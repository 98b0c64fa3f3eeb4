package server

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/policy"
)

func TestListProfiles(t *testing.T) {
	t.Parallel()
	client := policydv1.NewPolicyServiceClient(startServer(t))
	resp, err := client.ListProfiles(testContext(t), &policydv1.ListProfilesRequest{})
	if err != nil {
		t.Fatalf("ListProfiles: %v", err)
	}
	var names []string
	for _, p := range resp.GetProfiles() {
		names = append(names, p.GetName())
		if p.GetSource() != "built-in" || p.GetDefaultStrategy() == nil {
			t.Errorf("profile %s: source %q, default strategy %v; want built-in with a default", p.GetName(), p.GetSource(), p.GetDefaultStrategy())
		}
	}
	if got, want := strings.Join(names, ","), "agent_cli,default,task_runner,web_fetch"; got != want {
		t.Errorf("profiles = %s, want %s", got, want)
	}
}

func TestGetProfile(t *testing.T) {
	t.Parallel()
	client := policydv1.NewPolicyServiceClient(startServer(t))
	tests := []struct {
		name      string
		profile   string
		wantCode  codes.Code
		wantField string
		wantText  string
	}{
		{name: "known", profile: "task_runner", wantCode: codes.OK},
		{name: "unknown", profile: "nope", wantCode: codes.NotFound, wantText: `profile "nope" not found; known: agent_cli, default`},
		{name: "missing", profile: "", wantCode: codes.InvalidArgument, wantField: "name"},
		{name: "bad name", profile: "A B", wantCode: codes.InvalidArgument, wantField: "name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			resp, err := client.GetProfile(testContext(t), &policydv1.GetProfileRequest{Name: tt.profile})
			if got := status.Code(err); got != tt.wantCode {
				t.Fatalf("code = %v, want %v (err %v)", got, tt.wantCode, err)
			}
			if got := violationField(err); got != tt.wantField {
				t.Errorf("BadRequest field = %q, want %q", got, tt.wantField)
			}
			if msg := status.Convert(err).Message(); !strings.Contains(msg, tt.wantText) {
				t.Errorf("message %q does not contain %q", msg, tt.wantText)
			}
			if err == nil && (resp.GetProfile().GetName() != tt.profile || len(resp.GetProfile().GetStrategies()) == 0) {
				t.Errorf("profile = %v, want %s with its strategies", resp.GetProfile(), tt.profile)
			}
		})
	}
}

// SetPolicy swaps the policy under a running server.
func TestSetPolicy(t *testing.T) {
	t.Parallel()
	ps := NewPolicyServer(policy.Builtin(), WithClock(func() time.Time { return testNow }), WithRand(fixedRand(0.5)))
	client := policydv1.NewPolicyServiceClient(startPolicyServer(t, ps))
	req := &policydv1.NextDelayRequest{Profile: "fast", Attempt: 1, Failure: &policydv1.Failure{HttpStatus: 500}}
	if _, err := client.NextDelay(testContext(t), req); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("NextDelay before SetPolicy: %v, want InvalidArgument", err)
	}

	p, err := policy.Parse([]byte(`profiles: {fast: {extends: default, strategies: {SERVER_ERROR: {retry: true, max_attempts: 9, backoff: constant, initial_delay: 2s}}}}`),
		"test.yaml", policy.Caps{})
	if err != nil {
		t.Fatal(err)
	}
	ps.SetPolicy(p)
	if d := nextDelay(t, client, req); d.GetAction() != retry || d.GetDelay().AsDuration() != 2*time.Second {
		t.Errorf("after SetPolicy: %v after %v, want retry after 2s", d.GetAction(), d.GetDelay().AsDuration())
	}
	resp, err := client.GetProfile(testContext(t), &policydv1.GetProfileRequest{Name: "fast"})
	if err != nil || resp.GetProfile().GetSource() != "test.yaml" {
		t.Errorf("GetProfile(fast) = %v, %v; want source test.yaml", resp.GetProfile(), err)
	}
}
