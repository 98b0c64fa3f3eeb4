package policyd

import (
	"path"
	"strings"
)

// defaultAgent is the agent a journaled context names when the caller
// gives none, the same in every client: the program's file name without
// its extension ("/usr/bin/fetcher" and "fetcher.py" are both "fetcher"),
// or the package's name for a __main__ file. The journal's views group by
// agent, so a Go binary, a Python script and a Node script of the same name
// land in one row.
func defaultAgent(program string) string {
	program = strings.ReplaceAll(program, `\`, "/")
	dir, base := path.Split(program)
	if i := strings.LastIndexByte(base, '.'); i > 0 {
		base = base[:i]
	}
	if base == "__main__" {
		if p := path.Base(path.Clean(dir)); p != "." && p != "/" {
			base = p
		}
	}
	return base
}
