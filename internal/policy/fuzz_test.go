package policy

import (
	"strings"
	"testing"
	"time"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

// FuzzParse feeds the policy file parser arbitrary documents: it must
// return a policy or an error naming the file, never panic, and a policy it
// returns must decide.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"profiles:\n  fast:\n    extends: default\n    strategies:\n      SERVER_ERROR: {retry: true, max_attempts: 9, backoff: constant, initial_delay: 2s}\n",
		"profiles:\n  task_runner:\n    strategies:\n      TASK_TRANSIENT: {retry: true, max_attempts: 2, backoff: constant, initial_delay: 1s}\n",
		"lists:\n  network_codes: [EMYNEWCODE]\nrules:\n  - id: acme.busy\n    when: [{provider: [acme], text: [reactor busy]}]\n    type: OVERLOADED\n    retryable: true\n    recovery: Wait.\n",
		"profiles:\n  tight:\n    extends: default\n    budget: 10s\n",
		"profiles: [1, 2]\n", "{", "", "profiles:\n  x:\n    extends: x\n",
		"webhooks:\n  - url: https://hooks.example.test/p\n    secret_env: HOOK_SECRET\n    events: [breaker_opened, key_stopped]\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data, "p.yaml", Caps{})
		if err != nil {
			if !strings.Contains(err.Error(), "p.yaml") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		for _, name := range p.ProfileNames() {
			req := &policydv1.NextDelayRequest{Profile: name, Attempt: 1,
				Failure: &policydv1.Failure{HttpStatus: 503, Body: "overloaded"}}
			if d := p.NextDelay(req, time.Unix(0, 0), fixedRand(0.5)); d == nil {
				t.Fatalf("profile %q: no decision", name)
			}
		}
	})
}
