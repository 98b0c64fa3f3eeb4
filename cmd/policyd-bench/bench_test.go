package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
)

func TestParseGoBench(t *testing.T) {
	out := []byte("goos: linux\nBenchmarkClassify-2   \t  700000\t      1790 ns/op\t     112 B/op\t       2 allocs/op\n" +
		"BenchmarkDecide-2 \t 26000000\t        45.10 ns/op\t       0 B/op\t       0 allocs/op\nPASS\n")
	got, err := parseGoBench(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []goBenchmark{{"BenchmarkClassify", 1790, 2}, {"BenchmarkDecide", 45.1, 0}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("parseGoBench = %+v, want %+v", got, want)
	}
	if _, err := parseGoBench([]byte("FAIL\n")); err == nil {
		t.Error("parseGoBench of no benchmark lines: no error")
	}
}

func TestReplaceSection(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.md")
	if err := os.WriteFile(path, []byte("# B\n<!-- x: begin -->\nold\n<!-- x: end -->\ntail\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := replaceSection(path, "x", "new\n"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if got, want := string(b), "# B\n<!-- x: begin -->\nnew\n<!-- x: end -->\ntail\n"; got != want {
		t.Errorf("after replaceSection:\n%s\nwant:\n%s", got, want)
	}
	if err := replaceSection(path, "missing", "y"); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("replaceSection without markers: %v, want an error naming them", err)
	}
}

// The journaled scenarios' context ids must be UUIDs the daemon accepts,
// distinct per scenario, worker and block of attempts.
func TestContextIDsAreDistinctUUIDs(t *testing.T) {
	seen := map[string]bool{}
	for s := range 3 {
		for w := range 50 {
			for b := range 3 {
				id := contextID(0xdeadbeef, s, w, b)
				if _, err := uuid.Parse(id); err != nil {
					t.Fatalf("contextID = %q: %v", id, err)
				}
				if seen[id] {
					t.Fatalf("contextID %q repeats", id)
				}
				seen[id] = true
			}
		}
	}
}

func TestParseConfigNamesTheBadFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--database-url", "postgres://x", "--seconds", "0"}, "--seconds"},
		{[]string{"--seconds", "3"}, "--database-url"},
		{[]string{"--database-url", "postgres://x", "--growth", "1,a"}, "--growth"},
	} {
		t.Setenv("DATABASE_URL", "")
		t.Setenv("BENCH_SECONDS", "")
		_, err := parseConfig(tc.args, new(strings.Builder))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseConfig(%q) = %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
}
