package cases

import (
	"testing"

	"github.com/policyd/policyd/internal/policy"
)

// An operator's case file is untrusted input to check-rules: whatever it
// holds, Parse returns a file or an error, and a parsed case replays.
func FuzzParse(f *testing.F) {
	f.Add([]byte("cases:\n  - id: a\n    failure: {http_status: 429, headers: {retry-after: 3}}\n    expect: {retryable: true, delay_min: 1s}\n"))
	f.Add([]byte("suite: peers\ncases:\n  - id: a/b\n    now: \"2023-09-29T16:26:37Z\"\n    failure_type: RATE_LIMIT\n    attempt: 2\n    expect: {action: retry}\n    policyd: {why: x, expect: {action: stop}}\n"))
	f.Add([]byte("cases: [{id: x, failure: {causes: [{code: ECONNRESET}]}, expect: {type: CONNECTION_ERROR}}]"))
	p := policy.Builtin()
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data, "fuzz.yaml")
		if err != nil {
			return
		}
		for _, c := range file.Cases {
			Replay(p, c)
		}
	})
}
