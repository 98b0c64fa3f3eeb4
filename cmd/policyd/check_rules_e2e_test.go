package main

import (
	"path/filepath"
	"testing"
)

// An operator's labelled cases, replayed by the real binary against the
// built-in rules and against a policy file that teaches policyd a new error.
func TestCheckRulesE2E(t *testing.T) {
	t.Parallel()
	bin := policydBinary(t)
	dir := t.TempDir()
	good, bad, broken := filepath.Join(dir, "good.yaml"), filepath.Join(dir, "bad.yaml"), filepath.Join(dir, "broken.yaml")
	teach, rules := filepath.Join(dir, "teach.yaml"), filepath.Join(dir, "policy.yaml")
	writeFile(t, good, `suite: mine
group: acme
cases:
  - id: acme/429
    source: {url: "https://status.acme.example/incident/1"}
    failure: {provider: acme, http_status: 429, headers: {retry-after: 3}}
    expect: {retryable: true, type: RATE_LIMIT, rule: rate_limit, action: retry, delay_min: 3.3s, delay_max: 3.63s}
  - id: acme/401
    source: {url: "https://status.acme.example/incident/2"}
    failure: {provider: acme, http_status: 401}
    expect: {retryable: false, action: stop, stop_reason: not_retryable}
`)
	writeFile(t, bad, `suite: mine
group: acme
cases:
  - id: acme/429
    source: {url: "https://status.acme.example/incident/1"}
    failure: {provider: acme, http_status: 429}
    expect: {retryable: true}
  - id: acme/reactor
    source: {url: "https://status.acme.example/incident/3"}
    failure: {provider: acme, http_status: 200, message: "reactor busy, come back later"}
    expect: {retryable: true, type: OVERLOADED}
`)
	writeFile(t, broken, `suite: mine
cases:
  - id: acme/typo
    failure: {provider: acme, http_status: 429}
    expect: {retryabel: true}
`)
	writeFile(t, rules, `rules:
  - id: acme.reactor_busy
    when:
      - provider: [acme]
        message: ["reactor busy"]
    type: OVERLOADED
    retryable: true
    recovery: Wait for the reactor, then retry.
`)
	writeFile(t, teach, `suite: mine
cases:
  - id: acme/reactor
    source: {url: "https://status.acme.example/incident/3"}
    failure: {provider: acme, http_status: 200, message: "reactor busy, come back later"}
    expect: {retryable: true, type: OVERLOADED, rule: acme.reactor_busy}
`)
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{name: "all agree", args: []string{"--cases", good}, wantStdout: "check-rules: 2 cases, 2 agree, 0 differ on purpose, 0 disagree\n"},
		{name: "a disagreement names the case, its line and the rule", args: []string{"--cases", bad}, wantCode: 1,
			wantStdout: bad + ":8: case acme/reactor: policyd answered UNKNOWN retryable=false rule=status.other → stop (not_retryable)\n" +
				"    retryable: want true, got false\n    type: want OVERLOADED, got UNKNOWN\n",
			wantStderr: "check-rules: 1 of 2 cases disagree"},
		{name: "the policy file's rule fixes it", args: []string{"--cases", teach, "--policy", rules},
			wantStdout: "check-rules: 1 cases, 1 agree, 0 differ on purpose, 0 disagree\n"},
		{name: "without the rule it fails", args: []string{"--cases", teach}, wantCode: 1, wantStdout: "rule: want acme.reactor_busy, got status.other"},
		{name: "agreement per group", args: []string{"--cases", good, "--agreement"}, wantStdout: "agreement: mine     acme"},
		{name: "a misspelt key names its line", args: []string{"--cases", broken}, wantCode: 1, wantStderr: broken + ": yaml: unmarshal errors:\n  line 5: field retryabel not found"},
		{name: "no cases flag", args: nil, wantCode: 2, wantStderr: "--cases: give at least one case file"},
		{name: "missing file", args: []string{"--cases", filepath.Join(dir, "nope.yaml")}, wantCode: 1, wantStderr: "nope.yaml: no such file"},
		{name: "bad policy file", args: []string{"--cases", good, "--policy", broken}, wantCode: 1, wantStderr: broken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			runCommand(t, bin, "", append([]string{"check-rules"}, tt.args...), tt.wantCode, tt.wantStdout, tt.wantStderr)
		})
	}
}
