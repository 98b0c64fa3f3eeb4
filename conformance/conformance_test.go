// Package conformance replays the peers' retry tests and the real-failure
// corpus (the YAML files beside this one, described in README.md) through
// the real classifier and NextDelay.
package conformance

import (
	"bytes"
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/policyd/policyd/internal/cases"
	"github.com/policyd/policyd/internal/policy"
)

var update = flag.Bool("update", false, "rewrite the generated tables of docs/conformance.md")

const docPath = "../docs/conformance.md"

func load(t *testing.T) (*policy.Policy, []*cases.Case) {
	t.Helper()
	// No environment caps: the cases assert the profiles as written.
	p, err := policy.Load("profiles.yaml", func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	return p, readCases(t)
}

// readCases reads every case of peers/ and corpus/.
func readCases(t *testing.T) []*cases.Case {
	t.Helper()
	files, err := cases.ReadAll("peers", "corpus")
	if err != nil {
		t.Fatal(err)
	}
	var all []*cases.Case
	for _, f := range files {
		all = append(all, f.Cases...)
	}
	return all
}

// TestCases replays every case, one subtest per case id. A case fails when
// policyd disagrees with its source without a documented reason, or when a
// documented disagreement has gone stale.
func TestCases(t *testing.T) {
	p, all := load(t)
	if len(all) == 0 {
		t.Fatal("no cases")
	}
	var outcomes []*cases.Outcome
	for _, c := range all {
		o := cases.Replay(p, c)
		outcomes = append(outcomes, o)
		t.Run(c.ID, func(t *testing.T) {
			switch {
			case o.Err != nil:
				t.Errorf("%s: %v", c.File, o.Err)
			case len(o.Mismatches) > 0:
				t.Errorf("%s: policyd answered %s\n  %s\n  source: %s", c.File, o.Explain(), strings.Join(o.Mismatches, "\n  "), c.Source)
			case !o.Pass():
				t.Errorf("%s: policyd now gives the source's verdict (%s): remove the case's policyd block", c.File, o.Explain())
			}
		})
	}
	var buf bytes.Buffer
	cases.WriteSummary(&buf, cases.Summarize(outcomes))
	t.Log("\n" + buf.String())
}

var commitPattern = regexp.MustCompile(`^[0-9a-f]{40}$`)

// TestSources checks that every case names where it comes from: a peer's
// repository, file, test and commit, or a corpus failure's repository file
// at a commit or its page.
func TestSources(t *testing.T) {
	_, all := load(t)
	for _, c := range all {
		s := c.Source
		switch {
		case c.Suite != "peers" && c.Suite != "corpus":
			t.Errorf("%s: suite %q: want peers or corpus", c.File, c.Suite)
		case s.Repo != "" && !commitPattern.MatchString(s.Commit):
			t.Errorf("%s: source.commit %q: a repository source needs its full commit", c.File, s.Commit)
		case s.Repo != "" && s.File == "":
			t.Errorf("%s: source.file: a repository source needs the file", c.File)
		case s.Repo == "" && s.URL == "":
			t.Errorf("%s: source: needs repo, commit and file, or url", c.File)
		case c.Suite == "peers" && (s.Repo == "" || s.Test == ""):
			t.Errorf("%s: source: a peer case names the peer's repository and test", c.File)
		case c.Expect.Retryable == nil && c.Expect.Action == "" && c.Expect.Type == "":
			t.Errorf("%s: expect: a case asserts retryable, a type or an action", c.File)
		}
	}
}

// TestConformanceDoc keeps the generated tables of docs/conformance.md
// current: go test ./conformance -run TestConformanceDoc -update rewrites them.
func TestConformanceDoc(t *testing.T) {
	p, all := load(t)
	var outcomes []*cases.Outcome
	for _, c := range all {
		outcomes = append(outcomes, cases.Replay(p, c))
	}
	var agreement, differ bytes.Buffer
	cases.WriteTable(&agreement, cases.Summarize(outcomes))
	cases.WriteDisagreements(&differ, outcomes)

	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	got := string(doc)
	want := replaceBetween(t, got, "agreement", agreement.String())
	want = replaceBetween(t, want, "disagreements", differ.String())
	if want == got {
		return
	}
	if *update {
		if err := os.WriteFile(docPath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("docs/conformance.md is not current: run go test ./conformance -run TestConformanceDoc -update")
}

// replaceBetween replaces what stands between <!-- name:begin --> and
// <!-- name:end --> in doc.
func replaceBetween(t *testing.T, doc, name, body string) string {
	t.Helper()
	begin, end := "<!-- "+name+":begin -->\n", "<!-- "+name+":end -->"
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("%s: no %s and %s markers", docPath, strings.TrimSpace(begin), end)
	}
	return doc[:i+len(begin)] + body + doc[j:]
}
