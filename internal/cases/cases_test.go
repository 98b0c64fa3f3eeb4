package cases

import (
	"strings"
	"testing"

	"github.com/policyd/policyd/internal/policy"
)

func parse(t *testing.T, doc string) *File {
	t.Helper()
	f, err := Parse([]byte(doc), "cases.yaml")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return f
}

func TestParseErrorsNameTheLineAndField(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, doc, want string }{
		{"unknown key", "cases:\n  - id: a\n    failure: {http_status: 429}\n    expect: {retryabel: true}\n", "line 4: field retryabel not found"},
		{"bad id", "cases:\n  - id: A B\n    failure: {http_status: 429}\n    expect: {retryable: true}\n", "cases.yaml:2: id: \"A B\""},
		{"no expectation", "cases:\n  - id: a\n    failure: {http_status: 429}\n", "cases.yaml:2: case a: expect: a case needs at least one expected key"},
		{"bad failure field", "cases:\n  - id: a\n    failure: {http_stat: 429}\n    expect: {retryable: true}\n", "case a: failure: "},
		{"bad type", "cases:\n  - id: a\n    failure: {http_status: 429}\n    expect: {type: SLOW}\n", "expect: type: \"SLOW\" is not a failure type"},
		{"disagreement without a reason", "cases:\n  - id: a\n    failure: {http_status: 429}\n    expect: {retryable: true}\n    policyd: {expect: {retryable: false}}\n",
			"policyd.why: a disagreement needs its reason"},
		{"exact delay and a range", "cases:\n  - id: a\n    failure: {http_status: 429}\n    expect: {delay: 1s, delay_max: 2s}\n", "give an exact delay or a range"},
		{"no cases", "suite: x\n", "the file holds no case"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tt.doc), "cases.yaml")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// A documented disagreement passes while policyd answers what it says, and
// fails once policyd gives the source's verdict, so stale reasons go.
func TestDocumentedDisagreements(t *testing.T) {
	t.Parallel()
	p := policy.Builtin()
	f := parse(t, `suite: peers
group: sdk
cases:
  - id: sdk/501
    failure: {http_status: 501}
    expect: {retryable: true}
    policyd: {why: "501 means the feature is missing", expect: {retryable: false}}
  - id: sdk/stale
    failure: {http_status: 503}
    expect: {retryable: true}
    policyd: {why: "no longer true", expect: {retryable: false}}
  - id: sdk/agree
    failure: {http_status: 503}
    expect: {retryable: true, type: OVERLOADED, action: retry}
  - id: sdk/wrong
    failure: {http_status: 503}
    expect: {retryable: false}
`)
	want := map[string][2]bool{ // pass, agrees with source
		"sdk/501":   {true, false},
		"sdk/stale": {false, true},
		"sdk/agree": {true, true},
		"sdk/wrong": {false, false},
	}
	var outcomes []*Outcome
	for _, c := range f.Cases {
		o := Replay(p, c)
		outcomes = append(outcomes, o)
		if got := [2]bool{o.Pass(), o.AgreesWithSource()}; got != want[c.ID] {
			t.Errorf("%s: pass, agrees = %v, want %v (%v)", c.ID, got, want[c.ID], o.Mismatches)
		}
	}
	st := Summarize(outcomes)
	if len(st) != 1 || st[0].Cases != 4 || st[0].Agree != 1 || st[0].Documented != 1 || st[0].Failing != 2 || st[0].RetryableAgree != 2 {
		t.Errorf("stats = %+v", st)
	}
}

// Delays are checked at both ends of the random source: a range that only
// one end satisfies fails.
func TestDelaysAtBothEndsOfTheRandomSource(t *testing.T) {
	t.Parallel()
	p := policy.Builtin()
	f := parse(t, `cases:
  - id: full-jitter
    failure: {provider: openai, http_status: 500}
    expect: {action: retry, delay_min: 0s, delay_max: 1s}
  - id: too-narrow
    failure: {provider: openai, http_status: 500}
    expect: {action: retry, delay_min: 500ms, delay_max: 1s}
  - id: hint-dated-by-now
    now: "2023-09-29T16:26:37Z"
    failure: {http_status: 503, headers: {retry-after: "Fri, 29 Sep 2023 16:26:57 GMT"}}
    expect: {retry_after: 20s, action: retry, delay_min: 22s, delay_max: 24.2s}
`)
	for i, want := range []bool{true, false, true} {
		if o := Replay(p, f.Cases[i]); o.Pass() != want {
			t.Errorf("%s: pass = %v, want %v (%v)", f.Cases[i].ID, o.Pass(), want, o.Mismatches)
		}
	}
}
