package classifier

import "bytes"

// glob is a compiled lower-case pattern where '*' matches any run of bytes.
// Hand-written because path.Match treats '/' specially and works on
// strings, and this runs on pooled byte buffers on the hot path: the pattern
// is split at '*' once, so a match is a prefix, a suffix and ordered
// substring searches, with no backtracking.
type glob struct {
	pattern string
	parts   [][]byte // the pieces between '*'
	anchorL bool     // the pattern does not start with '*'
	anchorR bool     // the pattern does not end with '*'
	// need holds the bigrams of the pattern's pieces (see bigramMask): a
	// string lacking one of them cannot match, which most kinds show
	// without a search.
	need uint64
}

func compileGlob(pattern string) glob {
	g := glob{pattern: pattern}
	g.anchorL = len(pattern) == 0 || pattern[0] != '*'
	g.anchorR = len(pattern) == 0 || pattern[len(pattern)-1] != '*'
	g.parts = bytes.Split([]byte(pattern), []byte("*"))
	for _, p := range g.parts {
		g.need |= bigramMask(p)
	}
	return g
}

// bigramMask folds the byte pairs of s into 64 bits.
func bigramMask(s []byte) uint64 {
	var m uint64
	for i := 0; i+1 < len(s); i++ {
		m |= 1 << ((uint(s[i])*31 + uint(s[i+1])) & 63)
	}
	return m
}

func compileGlobs(patterns []string) []glob {
	var out []glob
	for _, p := range patterns {
		out = append(out, compileGlob(lowerString(p)))
	}
	return out
}

func lowerString(s string) string { return string(appendLower(nil, s, len(s))) }

// match reports whether lower-case s matches the pattern.
func (g *glob) match(s []byte) bool {
	parts := g.parts
	if len(parts) == 1 { // no '*'
		return bytes.Equal(parts[0], s)
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(s) < len(first)+len(last) || !bytes.HasPrefix(s, first) || !bytes.HasSuffix(s, last) {
		return false
	}
	s = s[len(first) : len(s)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := bytes.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return true
}

func matchAny(globs []glob, s []byte) bool {
	for i := range globs {
		if globs[i].match(s) {
			return true
		}
	}
	return false
}

// bigramSet records which byte pairs occur in a text (hashed into 4096 bits),
// so that a substring search can be skipped when one of the pattern's pairs
// is absent. Rules hold about a hundred phrases; most never occur, and this
// turns their searches into three bit tests.
type bigramSet [65]uint64 // the last word is all ones: see alwaysWord

func bigram(a, b byte) uint { return uint(a&63)<<6 | uint(b&63) }

// alwaysWord is a bigramSet word with every bit set, where phrases too short
// to have a byte pair point their first test, so that it always passes.
const alwaysWord = 64

func (s *bigramSet) build(text []byte) {
	clear(s[:])
	s[alwaysWord] = ^uint64(0)
	for i := 0; i+1 < len(text); i++ {
		h := bigram(text[i], text[i+1])
		s[h>>6] |= 1 << (h & 63)
	}
}

func (s *bigramSet) has(h uint) bool { return s[h>>6]&(1<<(h&63)) != 0 }

// substring is a lower-case phrase with the pairs it is checked for.
type substring struct {
	text []byte
	// pairs are five of the phrase's byte pairs, spread over it (first and
	// last included): English phrases share common pairs with long
	// messages, so three were too few to skip most searches. For a 1-byte
	// phrase, unused.
	pairs [5]uint
	// firstWord and firstBit locate pairs[0] in a bigramSet: the test most
	// phrases fail, done with one load where the phrases are looped over
	// (containsAny), before any call.
	firstWord uint8
	firstBit  uint64
}

func newSubstring(s string) substring {
	sub := substring{text: []byte(s), firstWord: alwaysWord, firstBit: 1}
	if n := len(s); n >= 2 {
		for k := range sub.pairs {
			i := (n - 2) * k / (len(sub.pairs) - 1)
			sub.pairs[k] = bigram(s[i], s[i+1])
		}
		sub.firstWord, sub.firstBit = uint8(sub.pairs[0]>>6), 1<<(sub.pairs[0]&63)
	}
	return sub
}

// maybeIn reports whether a text with these bigrams may contain the phrase.
func (sub *substring) maybeIn(bigrams *bigramSet) bool {
	if bigrams[sub.firstWord]&sub.firstBit == 0 {
		return false
	}
	p := &sub.pairs
	return len(sub.text) < 2 || (bigrams.has(p[4]) && bigrams.has(p[2]) && bigrams.has(p[1]) && bigrams.has(p[3]))
}

// in reports whether the phrase occurs in text; bigrams must describe a text
// that contains text.
func (sub *substring) in(text []byte, bigrams *bigramSet) bool {
	return sub.maybeIn(bigrams) && bytes.Contains(text, sub.text)
}
