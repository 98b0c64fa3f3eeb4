package policy

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// Every YAML example of docs/policy.md is a policy file policyd accepts.
func TestPolicyDocExamplesParse(t *testing.T) {
	doc, err := os.ReadFile("../../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?ms)^```yaml\n(.*?)^```").FindAllStringSubmatch(string(doc), -1)
	fleetExamples := 0
	for _, b := range blocks {
		p, err := Parse([]byte(b[1]), "docs/policy.md example", Caps{})
		if err != nil {
			t.Errorf("%v\nin:\n%s", err, b[1])
			continue
		}
		if strings.Contains(b[1], "fleet:") || strings.Contains(b[1], "fallbacks:") {
			fleetExamples++
		}
		if strings.Contains(b[1], "context_window_fallbacks") && len(p.Chains.ContextWindow["openai/gpt-4"]) != 1 {
			t.Errorf("seed 004's context fallback is not in the chain: %+v", p.Chains)
		}
	}
	if fleetExamples < 2 {
		t.Errorf("docs/policy.md has %d fleet or fallback-chain examples, want 2", fleetExamples)
	}
}
