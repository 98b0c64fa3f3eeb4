package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/webhook"
)

const hookSecretEnv = "POLICYD_E2E_HOOK_SECRET"

// The binary with two webhooks in its policy file, one receiver up and one
// down: a revoked key's fleet stop reaches the live receiver as a signed
// CloudEvent, the dead one is retried in the background, and decisions go
// on answering at once meanwhile. Not parallel: it sets the secret's
// environment variable, which the daemon inherits.
func TestServeWebhooksE2E(t *testing.T) {
	t.Setenv(hookSecretEnv, "e2e-secret")
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	var (
		mu     sync.Mutex
		bodies []string
		bad    []string
	)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if got := r.Header.Get(webhook.SignatureHeader); got != webhook.Sign([]byte("e2e-secret"), body) {
			bad = append(bad, "bad signature "+got)
		}
		bodies = append(bodies, string(body))
	}))
	defer up.Close()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + lis.Addr().String() + "/hook"
	lis.Close()

	file := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, file, `webhooks:
  - url: `+up.URL+`/hook
    secret_env: `+hookSecretEnv+`
    events: [key_stopped]
  - url: `+down+`
    secret_env: `+hookSecretEnv+`
`)
	d := startDaemon(t, ctx, "--policy", file, "--metrics-listen", "127.0.0.1:0", "--log-level", "debug")
	pc := d.dial(t)
	revoked := &policydv1.Failure{Provider: "openai", Model: "gpt-4o", KeyId: "prod", HttpStatus: 401,
		Body: `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`}
	resp, err := pc.NextDelay(ctx, &policydv1.NextDelayRequest{ClientId: "a", Attempt: 1, Failure: revoked})
	if err != nil || resp.GetDecision().GetAction() != policydv1.Action_ACTION_STOP {
		t.Fatalf("NextDelay(401): %v, %v", resp.GetDecision(), err)
	}

	eventually(t, "the live receiver gets the key stop", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(bodies) == 1
	})
	mu.Lock()
	got, problems := bodies[0], bad
	mu.Unlock()
	for _, want := range []string{`"type":"dev.policyd.fleet.key_stopped"`, `"specversion":"1.0"`, `"key_id":"prod"`, `"event":"key_stopped"`} {
		if !strings.Contains(got, want) {
			t.Errorf("the event lacks %s: %s", want, got)
		}
	}
	if len(problems) > 0 {
		t.Error(problems)
	}

	// The dead receiver is being retried; decisions do not wait on it.
	eventually(t, "a retry of the dead receiver is logged", func() bool {
		return d.hasRecord(map[string]string{"msg": "webhook: attempt failed, retrying", "url": down})
	})
	for i := range 20 {
		began := time.Now()
		if _, err := pc.NextDelay(ctx, &policydv1.NextDelayRequest{ClientId: "b", Attempt: 1, Failure: revoked}); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(began); took > time.Second {
			t.Errorf("decision %d took %v while a webhook receiver is down", i, took)
		}
	}
	_, metrics := httpGet(t, "http://"+d.metricsAddr(t)+"/metrics")
	if !strings.Contains(metrics, `policyd_webhook_events_total{result="delivered"} 1`) {
		t.Errorf("/metrics does not count the delivery:\n%s", grepLines(metrics, "policyd_webhook"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for line := range strings.Lines(s) {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "")
}

// A webhook whose secret's variable is unset stops the start, naming the
// file and line.
func TestServeWebhookWithoutSecretE2E(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, file, "profiles: {}\nwebhooks:\n  - url: http://127.0.0.1:9/hook\n    secret_env: POLICYD_E2E_UNSET_SECRET\n")
	runCommand(t, policydBinary(t), "", []string{"serve", "--listen", "127.0.0.1:0", "--policy", file}, 2, "",
		file+":3: webhooks: secret_env POLICYD_E2E_UNSET_SECRET is not set")
}
