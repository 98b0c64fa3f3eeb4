package migrations

import (
	"fmt"
	"io/fs"
	"regexp"
	"strings"
	"testing"
)

// TestFiles checks what tern relies on: files numbered 1, 2, 3, ... without
// gaps, each with SQL above and a down migration below the separator.
func TestFiles(t *testing.T) {
	t.Parallel()
	entries, err := fs.ReadDir(FS, ".")
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`^(\d{3})_[a-z0-9_]+\.sql$`)
	if len(entries) == 0 {
		t.Fatal("no migrations embedded")
	}
	for i, e := range entries {
		m := name.FindStringSubmatch(e.Name())
		if m == nil {
			t.Errorf("%s: want a name like 001_journal.sql", e.Name())
			continue
		}
		if want := fmt.Sprintf("%03d", i+1); m[1] != want {
			t.Errorf("%s: want number %s (no gaps)", e.Name(), want)
		}
		b, err := fs.ReadFile(FS, e.Name())
		if err != nil {
			t.Fatal(err)
		}
		up, down, ok := strings.Cut(string(b), "---- create above / drop below ----")
		if !ok || strings.TrimSpace(up) == "" || strings.TrimSpace(down) == "" {
			t.Errorf("%s: want SQL above and below %q", e.Name(), "---- create above / drop below ----")
		}
		if strings.Contains(string(b), "{{") {
			t.Errorf("%s: tern runs migrations through text/template; %q would be taken as a template action", e.Name(), "{{")
		}
	}
}
