package main

import (
	"go/build"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const module = "github.com/policyd/policyd/"

// testSupport are packages imported by tests (and the simulator), placed
// for the check in the layer of the package named: the storage layer for
// those that stand in for or set up storage, the service layer for the one
// that serves the gRPC server in memory.
var testSupport = map[string]string{
	"internal/journal/journaltest": "internal/journal", "internal/fleet/fleettest": "internal/journal",
	"internal/auth/authtest": "internal/journal", "internal/server/servertest": "internal/server",
}

// TestArchitectureLayers: docs/architecture.md's table of layers is the
// code's. Every package under internal/ and cmd/ is in the table, imports
// only packages of its own layer or of the layers above it, and every file
// the page names exists.
func TestArchitectureLayers(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	layer := map[string]int{}
	row := regexp.MustCompile(`(?m)^\| [a-z ]+ \| ([^|]+) \|`)
	name := regexp.MustCompile("`([a-z0-9/-]+)`")
	for i, m := range row.FindAllStringSubmatch(string(doc), -1) {
		for _, n := range name.FindAllStringSubmatch(m[1], -1) {
			pkg := n[1]
			if !strings.HasPrefix(pkg, "cmd/") {
				pkg = "internal/" + pkg
			}
			layer[pkg] = i
		}
	}
	if _, ok := layer["internal/journal"]; !ok || len(layer) < 10 {
		t.Fatalf("no layer table in docs/architecture.md (read %v)", layer)
	}
	for pkg, beside := range testSupport {
		layer[pkg] = layer[beside]
	}

	var dirs []string
	for _, top := range []string{"internal", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == "testdata" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			if d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	checked := 0
	for _, dir := range dirs {
		p, err := build.ImportDir(dir, 0)
		if err != nil {
			continue // no Go files
		}
		rel, _ := filepath.Rel(root, dir)
		pkg := filepath.ToSlash(rel)
		own, ok := layer[pkg]
		if !ok {
			t.Errorf("%s is in no layer of docs/architecture.md", pkg)
			continue
		}
		checked++
		for _, imp := range p.Imports {
			dep, ok := strings.CutPrefix(imp, module)
			if !ok || strings.HasPrefix(dep, "gen/") {
				continue
			}
			if l, ok := layer[dep]; ok && l > own {
				t.Errorf("%s (layer %d) imports %s (layer %d, below it)", pkg, own, dep, l)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("checked %d packages; the walk found too few", checked)
	}

	file := regexp.MustCompile("`((?:internal|cmd|migrations|docs)/[A-Za-z0-9_./-]+)`")
	for _, m := range file.FindAllStringSubmatch(string(doc), -1) {
		if _, err := os.Stat(filepath.Join(root, m[1])); err != nil {
			t.Errorf("docs/architecture.md names %s, which does not exist", m[1])
		}
	}
}
