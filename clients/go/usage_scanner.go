package policyd

import "bytes"

// usageScanner reads, in a response body as it passes in pieces, the
// token counts the provider reported (docs/clients.md, "What a success
// used"): the FIRST input count, the number after `"prompt_tokens":`
// (OpenAI's chat) or `"input_tokens":` (Anthropic's, OpenAI's responses),
// and the LAST output count, after `"completion_tokens":` or
// `"output_tokens":` (Anthropic's stream says it twice: a small count in
// message_start, the final one in message_delta at its end). JSON
// whitespace is allowed after the colon, in a JSON body or an SSE event
// alike. It never holds the body up: it looks at each piece once and keeps
// only the last few bytes, so that a key split across two reads is still
// found.
type usageScanner struct {
	state  scanState
	kind   usageKind                      // the key whose value is being read
	tail   [len(longestUsageKey) - 1]byte // the last bytes seen, while seeking
	tailN  int
	count  uint64
	digits int
	// input and output are the counts found (hasInput, hasOutput).
	input, output       uint64
	hasInput, hasOutput bool
}

type scanState uint8

const (
	scanSeeking scanState = iota // for a key
	scanValue                    // after a key's colon: whitespace, then digits
)

// usageKind is what a key counts.
type usageKind uint8

const (
	inputUsage usageKind = iota
	outputUsage
)

// The keys end alike; usageKeySuffix is what the scan looks for first.
const (
	usageKeySuffix  = `_tokens":`
	longestUsageKey = `"completion_tokens":`
)

var (
	usageKeySuffixBytes = []byte(usageKeySuffix)
	usageKeyStarts      = [...]struct {
		start string
		kind  usageKind
	}{{`"prompt`, inputUsage}, {`"input`, inputUsage}, {`"completion`, outputUsage}, {`"output`, outputUsage}}
)

// maxScannedCount stops a runaway number growing: far above any count a
// report carries (2,000,000 a call).
const maxScannedCount = 1 << 40

// found returns the input count, once the scan has one.
func (s *usageScanner) found() (uint64, bool) { return s.input, s.hasInput }

// foundOutput returns the last output count seen so far: the call's once
// the body has ended.
func (s *usageScanner) foundOutput() (uint64, bool) { return s.output, s.hasOutput }

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
		}
	}
}

// seek returns the index in b just past the first key's colon (the key
// may start in the tail), or -1, keeping b's last bytes for the next
// piece; s.kind is the key's.
func (s *usageScanner) seek(b []byte) int {
	if s.tailN > 0 {
		// A key that starts in the tail ends in b's first bytes.
		var buf [2*len(longestUsageKey) - 2]byte
		w := append(buf[:0], s.tail[:s.tailN]...)
		w = append(w, b[:min(len(b), len(longestUsageKey)-1)]...)
		if at, end, kind := usageKeyIn(w); at >= 0 && at < s.tailN {
			n := s.tailN
			s.tailN, s.kind = 0, kind
			return end - n
		}
	}
	if _, end, kind := usageKeyIn(b); end >= 0 {
		s.tailN, s.kind = 0, kind
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

// usageKeyIn returns where the first whole key in b starts, the index
// just past its colon, and what it counts; -1, -1 when b has none.
func usageKeyIn(b []byte) (at, end int, kind usageKind) {
	from := 0
	for {
		i := bytes.Index(b[from:], usageKeySuffixBytes)
		if i < 0 {
			return -1, -1, 0
		}
		i += from
		for _, k := range usageKeyStarts {
			if i >= len(k.start) && string(b[i-len(k.start):i]) == k.start {
				return i - len(k.start), i + len(usageKeySuffix), k.kind
			}
		}
		from = i + 1
	}
}

// value reads a key's value: whitespace, then a whole number ended by any
// other byte, kept as the input count if it is the first, as the output
// count whichever it is. A value that is no number (null, a string) is
// passed over. Either way the scan seeks the next key. It returns what is
// left of b.
func (s *usageScanner) value(b []byte) []byte {
	for i, c := range b {
		switch {
		case c >= '0' && c <= '9':
			s.count = min(s.count*10+uint64(c-'0'), maxScannedCount)
			s.digits++
		case s.digits == 0 && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
		case s.digits > 0:
			s.keep()
			s.state = scanSeeking
			return b[i:]
		default:
			s.state = scanSeeking
			return b[i:]
		}
	}
	return nil
}

// keep takes the number just read.
func (s *usageScanner) keep() {
	switch {
	case s.kind == outputUsage:
		s.output, s.hasOutput = s.count, true
	case !s.hasInput:
		s.input, s.hasInput = s.count, true
	}
}
