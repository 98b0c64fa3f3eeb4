package main

import (
	"github.com/policyd/policyd/internal/fleetsim"

	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/policyd/policyd/internal/journal/journaltest"
)

func TestMain(m *testing.M) { journaltest.Main(m) }

// Three replicas share the fleet through a real PostgreSQL: the lines say
// replicas=3, and the table names them.
func TestRunReplicas(t *testing.T) {
	dir := t.TempDir()
	doc := filepath.Join(dir, "fleet-simulation.md")
	if err := os.WriteFile(doc, []byte(beginMarker+"\n"+endMarker+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err := run([]string{"-scenario", "herd,classes", "-policy", "fleet,sdk", "-life", "inf", "-replicas", "1,3",
		"-database-url", journaltest.DatabaseURL(t), "-doc", doc}, &out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	// herd: fleet and sdk alone, then fleet with 3 replicas; classes: alone only.
	if len(lines) != 5 || !strings.Contains(lines[2], "policy=fleet agents=200 life=inf replicas=3 ") {
		t.Fatalf("lines:\n%s\nwant 5, the third fleet with replicas=3", out.String())
	}
	if md, _ := os.ReadFile(doc); !strings.Contains(string(md), "| herd | inf | **fleet** ×3 replicas |") {
		t.Fatalf("the table does not name the replicas:\n%s", md)
	}
}

func TestRunWritesLinesChartAndTable(t *testing.T) {
	dir := t.TempDir()
	doc := filepath.Join(dir, "fleet-simulation.md")
	before, after := "# Title\n\ntext\n\n", "\n## Configuration\n"
	if err := os.WriteFile(doc, []byte(before+beginMarker+"\nold table\n"+endMarker+after), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err := run([]string{"-scenario", "herd", "-policy", "fleet,sdk", "-life", "inf,3", "-svg-dir", dir, "-doc", doc}, &out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines, want 4 (2 policies × 2 lifetimes):\n%s", len(lines), out.String())
	}
	for i, want := range []string{"policy=fleet agents=200 life=inf", "policy=sdk agents=200 life=inf", "policy=fleet agents=200 life=3", "policy=sdk agents=200 life=3"} {
		if !strings.HasPrefix(lines[i], "sim: scenario=herd "+want+" amplification=") {
			t.Errorf("line %d = %q, want %q", i, lines[i], want)
		}
	}
	svg, err := os.ReadFile(filepath.Join(dir, "herd.svg"))
	if err != nil || !bytes.Contains(svg, []byte("<svg")) {
		t.Fatalf("herd.svg: %v", err)
	}
	// Both panels: the incident's window shaded, and every policy's line
	// labelled in the legend.
	for label, n := range map[string]int{"fill:#E8E8F0": 4, ">incident</text>": 2, ">fleet</text>": 2, ">sdk</text>": 2} {
		if got := bytes.Count(svg, []byte(label)); got != n {
			t.Errorf("herd.svg has %q %d times, want %d", label, got, n)
		}
	}
	md, _ := os.ReadFile(doc)
	s := string(md)
	if !strings.HasPrefix(s, before+beginMarker) || !strings.HasSuffix(s, endMarker+after) || strings.Contains(s, "old table") {
		t.Fatalf("the table was not replaced between the markers:\n%s", s)
	}
	if n := strings.Count(s, "\n| herd | "); n != 4 {
		t.Errorf("%d table rows, want 4:\n%s", n, s)
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-scenario", "nope"}, {"-policy", "nope"}, {"-life", "0.5"}, {"extra"},
		{"-replicas", "0"}, {"-replicas", "three"}} {
		if err := run(append(args, "-agents", "10"), &bytes.Buffer{}); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	dir := t.TempDir()
	doc := filepath.Join(dir, "x.md")
	_ = os.WriteFile(doc, []byte("no markers"), 0o644)
	if err := run([]string{"-scenario", "herd", "-policy", "sdk", "-life", "3", "-agents", "10", "-doc", doc}, &bytes.Buffer{}); err == nil {
		t.Error("a doc without markers accepted")
	}
}

// Every policy has a line style: a policy without one drew no line, and
// nobody saw it.
func TestEveryPolicyHasALineStyle(t *testing.T) {
	t.Parallel()
	for _, p := range fleetsim.PolicyNames {
		if _, ok := styles[p]; !ok {
			t.Errorf("policy %s has no line style", p)
		}
	}
}
