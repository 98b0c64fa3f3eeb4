package policyd

import "bytes"

// usageScanner finds, in a response body as it passes in pieces, the
// first input-token count the provider reported (docs/clients.md, "What a
// success used"): the number after `"prompt_tokens":` (OpenAI's chat) or
// `"input_tokens":` (Anthropic's, OpenAI's responses), JSON whitespace
// allowed after the colon, in a JSON body or an SSE event alike. It never
// holds the body up: it looks at each piece once and keeps only the last
// few bytes, so that a key split across two reads is still found.
type usageScanner struct {
	state  scanState
	tail   [len(longestUsageKey) - 1]byte // the last bytes seen, while seeking
	tailN  int
	count  uint64
	digits int
}

type scanState uint8

const (
	scanSeeking scanState = iota // for a key
	scanValue                    // after a key's colon: whitespace, then digits
	scanFound                    // count is the answer
)

// The keys end alike; usageKeySuffix is what the scan looks for first.
const (
	usageKeySuffix  = `_tokens":`
	longestUsageKey = `"prompt_tokens":`
)

var (
	usageKeySuffixBytes = []byte(usageKeySuffix)
	usageKeyStarts      = [...]string{`"prompt`, `"input`}
)

// maxScannedCount stops a runaway number growing: far above any count a
// report carries (2,000,000 a call).
const maxScannedCount = 1 << 40

// found returns the count, once the scan has one.
func (s *usageScanner) found() (uint64, bool) {
	if s.state != scanFound {
		return 0, false
	}
	return s.count, true
}

// scan reads the next piece of the body.
func (s *usageScanner) scan(b []byte) {
	for len(b) > 0 {
		switch s.state {
		case scanSeeking:
			i := s.seek(b)
			if i < 0 {
				return
			}
			s.state, s.count, s.digits = scanValue, 0, 0
			b = b[i:]
		case scanValue:
			b = s.value(b)
		default:
			return
		}
	}
}

// seek returns the index in b just past the first key's colon (the key
// may start in the tail), or -1, keeping b's last bytes for the next piece.
func (s *usageScanner) seek(b []byte) int {
	if s.tailN > 0 {
		// A key that starts in the tail ends in b's first bytes.
		var buf [2*len(longestUsageKey) - 2]byte
		w := append(buf[:0], s.tail[:s.tailN]...)
		w = append(w, b[:min(len(b), len(longestUsageKey)-1)]...)
		if at, end := usageKeyIn(w); at >= 0 && at < s.tailN {
			n := s.tailN
			s.tailN = 0
			return end - n
		}
	}
	if _, end := usageKeyIn(b); end >= 0 {
		s.tailN = 0
		return end
	}
	s.keepTail(b)
	return -1
}

// keepTail keeps the last bytes seen (the tail's, then b's).
func (s *usageScanner) keepTail(b []byte) {
	if len(b) >= len(s.tail) {
		s.tailN = copy(s.tail[:], b[len(b)-len(s.tail):])
		return
	}
	if drop := s.tailN + len(b) - len(s.tail); drop > 0 {
		s.tailN = copy(s.tail[:], s.tail[drop:s.tailN])
	}
	s.tailN += copy(s.tail[s.tailN:], b)
}

// usageKeyIn returns where the first whole key in b starts and the index
// just past its colon; -1, -1 when b has none.
func usageKeyIn(b []byte) (at, end int) {
	from := 0
	for {
		i := bytes.Index(b[from:], usageKeySuffixBytes)
		if i < 0 {
			return -1, -1
		}
		i += from
		for _, k := range usageKeyStarts {
			if i >= len(k) && string(b[i-len(k):i]) == k {
				return i - len(k), i + len(usageKeySuffix)
			}
		}
		from = i + 1
	}
}

// value reads a key's value: whitespace, then a whole number ended by any
// other byte. A value that is no number (null, a string) is passed over
// and the scan seeks the next key. It returns what is left of b.
func (s *usageScanner) value(b []byte) []byte {
	for i, c := range b {
		switch {
		case c >= '0' && c <= '9':
			s.count = min(s.count*10+uint64(c-'0'), maxScannedCount)
			s.digits++
		case s.digits == 0 && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
		case s.digits > 0:
			s.state = scanFound
			return nil
		default:
			s.state = scanSeeking
			return b[i:]
		}
	}
	return nil
}
