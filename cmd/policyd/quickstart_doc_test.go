package main

import (
	"os"
	"regexp"
	"testing"
)

// The quick start as a new user meets it: make run's banner gives the demo
// command with the database URL in use (without it the demo prints no
// views), and the README says what the first run costs.
func TestQuickStartDocs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, file, want string
	}{
		{name: "banner: the demo with the database URL", file: "../../Makefile",
			want: `echo "  demo:   scripts/failing-run.sh \$\(LISTEN\) '\$\$url'"`},
		{name: "README: the first run takes about a minute", file: "../../README.md",
			want: "the first\\s+`make run` downloads and builds[^.]*about a\\s+minute"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, err := os.ReadFile(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			if !regexp.MustCompile(tc.want).Match(b) {
				t.Errorf("%s has nothing matching %s", tc.file, tc.want)
			}
		})
	}
}
