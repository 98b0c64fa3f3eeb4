package classifier

import (
	"strings"
	"testing"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/enums"
)

func TestDefaultRulesCompile(t *testing.T) {
	t.Parallel()
	c := newTestClassifier(t)
	ids := c.RuleIDs()
	// A timeout signal is told from a cancellation first; then an abort beats everything.
	if len(ids) < 30 || ids[1] != "timeout.signal" || ids[2] != "cancel.abort" {
		t.Errorf("built-in rules: %d rules starting %v", len(ids), ids[:4])
	}
}

// An operator adds a provider's new error string without a rebuild: a rule
// in front of the built-ins, a replaced built-in, and an extended list.
func TestOperatorRulesExtendTheBuiltIns(t *testing.T) {
	t.Parallel()
	extra, err := ParseRuleSet([]byte(`
lists:
  network_codes: [ENEWNETFAIL]
rules:
  - id: acme.busy
    when:
      - provider: [acme]
        text: ["reactor busy"]
    type: OVERLOADED
    retryable: true
    reason: acme's reactor is busy
    recovery: Wait for the reactor.
  - id: web.blocked
    when:
      - operation: [web_fetch]
        status: [403]
    type: PERMISSION_DENIED
    retryable: false
    reason: blocked
    recovery: Ask the site owner.
  - id: teapot
    before: invalid_request.400
    when:
      - status: [418]
    type: UNSUPPORTED
    retryable: false
    reason: a teapot
    recovery: Use a kettle.
`), "policy.yaml")
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	merged, err := DefaultRuleSet().Merge(extra)
	if err != nil {
		t.Fatalf("merge: %v", err)
	}
	c, err := New(merged)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	tests := []struct {
		name     string
		failure  *policydv1.Failure
		wantRule string
		wantType policydv1.FailureType
	}{
		{"new provider string", &policydv1.Failure{Provider: "ACME", HttpStatus: 400, Body: `{"error":{"message":"Reactor busy, come back"}}`}, "acme.busy", typeOverloaded},
		{"replaced rule keeps its place", &policydv1.Failure{Operation: "web_fetch", HttpStatus: 403}, "web.blocked", typePermission},
		{"inserted before", &policydv1.Failure{HttpStatus: 418}, "teapot", typeUnsupported},
		{"extended list", &policydv1.Failure{ErrorCode: "ENEWNETFAIL"}, "network.connection", typeConnection},
		{"built-ins still apply", &policydv1.Failure{HttpStatus: 529}, "overloaded", typeOverloaded},
	}
	for _, tc := range tests {
		got := c.Classify(tc.failure, nil, "")
		if got.GetRule() != tc.wantRule || got.GetFailureType() != tc.wantType {
			t.Errorf("%s: got %s/%v, want %s/%v", tc.name, got.GetRule(), got.GetFailureType(), tc.wantRule, tc.wantType)
		}
	}
	if got := c.Classify(&policydv1.Failure{Operation: "web_fetch", HttpStatus: 403}, nil, ""); got.GetRecoveryAction() != "Ask the site owner." {
		t.Errorf("replaced rule's recovery = %q", got.GetRecoveryAction())
	}
	ids := c.RuleIDs()
	if ids[0] != "acme.busy" {
		t.Errorf("added rule should come first, got %v", ids[:3])
	}
}

// A bad rules file is refused with its file, line and field.
func TestBadRulesNameLineAndField(t *testing.T) {
	t.Parallel()
	rule := func(body string) string {
		return "rules:\n  - id: r1\n" + body
	}
	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{"unknown field", rule("    when:\n      - status: [429]\n        colour: red\n    type: RATE_LIMIT\n    recovery: x\n"),
			[]string{"bad.yaml", "line 5", `"colour"`}},
		{"unknown rule field", rule("    wen: []\n"), []string{"line 3", `"wen"`}},
		{"bad type", rule("    when:\n      - status: [429]\n    type: SLOW\n    recovery: x\n"),
			[]string{"bad.yaml:2", `rule "r1"`, "type", `"SLOW"`}},
		{"bad status", rule("    when:\n      - status: [\"5xx\"]\n    type: SERVER_ERROR\n    recovery: x\n"),
			[]string{"bad.yaml:4", "when[0].status", `"5xx"`}},
		{"bad grpc code", rule("    when:\n      - grpc_code: [SLOWNESS]\n    type: SERVER_ERROR\n    recovery: x\n"),
			[]string{"bad.yaml:4", "when[0].grpc_code"}},
		{"bad phase", rule("    when:\n      - phase: [LATER]\n    type: SERVER_ERROR\n    recovery: x\n"),
			[]string{"when[0].phase"}},
		{"bad option", rule("    when:\n      - option: [retry_everything]\n    type: SERVER_ERROR\n    recovery: x\n"),
			[]string{"when[0].option"}},
		{"unknown list", rule("    when:\n      - code: [$nope]\n    type: SERVER_ERROR\n    recovery: x\n"),
			[]string{"when[0].code", `"nope"`}},
		{"no when", rule("    type: SERVER_ERROR\n    recovery: x\n"), []string{"bad.yaml:2", "when"}},
		{"empty block", rule("    when:\n      - {}\n    type: SERVER_ERROR\n    recovery: x\n"), []string{"when[0]", "at least one condition"}},
		{"no recovery", rule("    when:\n      - status: [500]\n    type: SERVER_ERROR\n"), []string{"recovery"}},
		{"no id", "rules:\n  - when:\n      - status: [500]\n    type: SERVER_ERROR\n    recovery: x\n", []string{"bad.yaml:2", "id"}},
		{"duplicate id", rule("    when: [{status: [500]}]\n    type: SERVER_ERROR\n    recovery: x\n  - id: r1\n    when: [{status: [501]}]\n    type: SERVER_ERROR\n    recovery: x\n"),
			[]string{"bad.yaml:6", "already used"}},
		{"not yaml", "rules: [", []string{"bad.yaml"}},
		{"wrong shape", "rules: {id: 1}", []string{"bad.yaml"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rs, err := ParseRuleSet([]byte(tc.doc), "bad.yaml")
			if err == nil {
				_, err = New(rs)
			}
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.doc)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestMergeBeforeUnknownRule(t *testing.T) {
	t.Parallel()
	extra, err := ParseRuleSet([]byte("rules:\n  - id: x\n    before: nope\n    when: [{status: [500]}]\n    type: SERVER_ERROR\n    recovery: x\n"), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DefaultRuleSet().Merge(extra); err == nil || !strings.Contains(err.Error(), "p.yaml:2") {
		t.Errorf("Merge error = %v, want one naming p.yaml:2", err)
	}
}

func TestGlobMatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern, s string
		want       bool
	}{
		{"und_err_*", "und_err_socket", true},
		{"und_err_*", "und_err_", true},
		{"und_err_*", "und_er", false},
		{"err_ssl_*_bad_record_mac", "err_ssl_decryption_failed_or_bad_record_mac", true},
		{"err_ssl_*_bad_record_mac", "err_ssl_bad_record_mac", false},
		{"*perday*", "generaterequestsperdayperproject", true},
		{"*", "", true},
		{"a*b*c", "axxbyyc", true},
		{"a*b*c", "axxbyy", false},
		{"exact", "exact", true},
		{"exact", "exactly", false},
	}
	for _, tc := range tests {
		g := compileGlob(tc.pattern)
		if got := g.match([]byte(tc.s)); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
}

// Every failure type has its own recovery text in the built-in rules data,
// so that no answer and no error report goes without one.
func TestEveryTypeHasText(t *testing.T) {
	c := Default()
	for _, name := range enums.Names[policydv1.FailureType]() {
		ft, _ := enums.Parse[policydv1.FailureType](name)
		if ft == policydv1.FailureType_FAILURE_TYPE_UNSPECIFIED {
			continue
		}
		if c.TypeText(ft).Recovery == "" {
			t.Errorf("%s: no recovery text in default_rules.yaml's types", name)
		}
	}
	if _, err := New(RuleSet{Types: map[string]TypeText{"NOPE": {Recovery: "x"}}}); err == nil || !strings.Contains(err.Error(), `"NOPE"`) {
		t.Errorf("an unknown type: %v", err)
	}
	if _, err := New(RuleSet{Types: map[string]TypeText{"TIMEOUT": {}}}); err == nil || !strings.Contains(err.Error(), "types.TIMEOUT.recovery") {
		t.Errorf("a type without recovery: %v", err)
	}
}
