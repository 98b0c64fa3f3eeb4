package classifier

import (
	"strings"
	"testing"
)

// TestGlobIndexMatchesEveryGlob checks that filing the globs by byte pair
// loses none: for each kind, code and name glob of the built-in rules, and
// for strings that do and do not fit it, mark sets exactly the blocks a scan
// of every glob sets.
func TestGlobIndexMatchesEveryGlob(t *testing.T) {
	c := newTestClassifier(t)
	words := (c.nblocks + 63) / 64
	for name, p := range map[string]*patternIndex{"kinds": &c.kinds, "codes": &c.codes, "names": &c.names} {
		if len(p.globs) == 0 {
			continue
		}
		var samples []string
		for _, g := range p.globs {
			samples = append(samples, strings.ReplaceAll(g.glob.pattern, "*", ""),
				strings.ReplaceAll(g.glob.pattern, "*", "x_"), "err_"+strings.Trim(g.glob.pattern, "*")+"_error")
		}
		samples = append(samples, "", "typeerror", "und_err_socket", "rate_limit_exceeded", "err_insufficient_balance")
		for _, s := range samples {
			got, want := make(bitset, words), make(bitset, words)
			p.mark(got, []byte(s))
			have := bigramMask([]byte(s))
			for _, g := range p.globs {
				if g.glob.need&have == g.glob.need && g.glob.match([]byte(s)) {
					for _, b := range g.blocks {
						want.set(b)
					}
				}
			}
			for _, b := range p.exact[s] {
				want.set(b)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("%s: %q: indexed globs marked %x, a scan of every glob %x", name, s, got[i], want[i])
				}
			}
		}
	}
}
