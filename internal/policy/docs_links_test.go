package policy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// outsidePaths are paths that point outside the repository: the design
// documents policyd was specified from lived in a shared directory next to
// it, and a reference to them means nothing to a reader of the repository
// (docs/seeds.md describes those systems instead).
var outsidePaths = []string{"/work/", "../shared", "shared/seeds"}

// publicURL matches a web address: conformance cases and docs cite public
// pages, and a path inside one is no path on this machine.
var publicURL = regexp.MustCompile(`https?://[^\s'"<>)\]]+`)

// The repository stands on its own: no tracked (or new, not ignored) text
// file points at a path outside it, such as the seeds' shared directory.
// Generated code and vendored dependencies are skipped; public URLs are fine.
func TestDocsStandAlone(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git work tree: %v", err)
	}
	root := strings.TrimSpace(string(out))
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	list, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	self := filepath.ToSlash(filepath.Join("internal", "policy", "docs_links_test.go"))

	checked := 0
	for _, name := range strings.Split(string(list), "\x00") {
		if name == "" || name == self || skipForLinks(name) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			if os.IsNotExist(err) { // deleted in the work tree, not yet in the index
				continue
			}
			t.Fatal(err)
		}
		if bytes.IndexByte(data, 0) >= 0 {
			continue // binary
		}
		checked++
		for i, line := range strings.Split(string(data), "\n") {
			stripped := publicURL.ReplaceAllString(line, "")
			for _, p := range outsidePaths {
				if strings.Contains(stripped, p) {
					t.Errorf("%s:%d: %q points outside the repository; describe it in the repository "+
						"(the seed systems: docs/seeds.md) instead:\n\t%s", name, i+1, p, strings.TrimSpace(line))
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no files checked: git ls-files listed none")
	}
}

// skipForLinks says which listed files are not the project's own text:
// generated code and vendored dependencies.
func skipForLinks(name string) bool {
	for _, dir := range strings.Split(name, "/") {
		switch dir {
		case "node_modules", "_gen", ".venv":
			return true
		}
	}
	return strings.HasPrefix(name, "gen/")
}
