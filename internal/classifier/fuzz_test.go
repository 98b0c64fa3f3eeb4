package classifier

import (
	"testing"
	"time"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

// FuzzClassify feeds arbitrary bodies, messages, codes and header values to
// the classifier: it must never panic and always answer with a rule.
func FuzzClassify(f *testing.F) {
	f.Add(int32(429), `{"error":{"message":"You exceeded your current quota","code":"insufficient_quota"}}`, "", "", "7")
	f.Add(int32(0), "", "fetch failed", "UND_ERR_SOCKET", "")
	f.Add(int32(503), googleQuotaBody("PerDay", "retry in 2s", "20s"), "", "", "Sun, 22 Nov 2026 12:00:30 GMT")
	f.Add(int32(400), `[{"error":{"__type":"x#ValidationException","message":"Input is too long"}}]`, "try again in 1m30s", "", "-1")
	f.Add(int32(0), `{"a":"\"`, `retry in 9999999999999h`, "ERR_SSL_*", "NaN")
	c := newTestClassifier(f)
	learned, err := New(DefaultRuleSet(), WithLearnedFallback(nil, DefaultProfile))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, status int32, body, message, code, retryAfter string) {
		failure := &policydv1.Failure{
			HttpStatus: status, Body: body, Message: message, ErrorCode: code,
			Headers: map[string]string{"retry-after": retryAfter, "x-ratelimit-reset": retryAfter, "retry-after-ms": retryAfter},
			Causes:  []*policydv1.Cause{{Name: code, Code: message, Message: body}},
		}
		got := c.Classify(failure, fetchErrorsOn, "agent_cli")
		if got.GetRule() == "" || got.GetFailureType() == policydv1.FailureType_FAILURE_TYPE_UNSPECIFIED {
			t.Fatalf("no answer for %+v: %v", failure, got)
		}
		if d := got.GetRetryAfter(); d != nil && (d.AsDuration() < 0 || d.AsDuration() > MaxDelayHint) {
			t.Fatalf("retry_after %v out of bounds", d.AsDuration())
		}
		// The learned fallback's reading of the same failure.
		if got := learned.Classify(failure, nil, ""); got.GetRule() == "" || got.GetFailureType() == policydv1.FailureType_FAILURE_TYPE_UNSPECIFIED {
			t.Fatalf("no answer with the learned fallback for %+v: %v", failure, got)
		}
	})
}

// FuzzDelayHints checks the delay hint parsers on arbitrary input: no panic,
// and every accepted delay within [0, MaxDelayHint].
func FuzzDelayHints(f *testing.F) {
	for _, s := range []string{"7", "1.5", "Sun, 22 Nov 2026 12:00:30 GMT", "6m0s", "1795348860", "2026-11-22T12:00:30Z",
		"retry in 20.5s", "try again in 59 seconds", "-1", "NaN", "1e400", "20s", ".", "+", "retry in 1.2.3m"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		now := time.Unix(1795348800, 0)
		check := func(name string, d time.Duration, ok bool) {
			if ok && (d < 0 || d > MaxDelayHint) {
				t.Fatalf("%s(%q) = %v, out of bounds", name, s, d)
			}
		}
		d, ok := ParseRetryAfter(s, now)
		check("ParseRetryAfter", d, ok)
		d, ok = ParseMillis(s)
		check("ParseMillis", d, ok)
		d, ok = ParseRateLimitReset(s, now)
		check("ParseRateLimitReset", d, ok)
		d, ok = ParseGoogleDuration(s)
		check("ParseGoogleDuration", d, ok)
		d, ok = ParseDelayPhrase([]byte(s))
		check("ParseDelayPhrase", d, ok)
	})
}

// FuzzScanJSONKeys checks the body scanner never panics and only reports
// values that are substrings of the input.
func FuzzScanJSONKeys(f *testing.F) {
	f.Add(googleQuotaBody("PerDay", "m", "1s"))
	f.Add(`{"a\"b":"c\\","d":-1e5,"e":[{"f":"g"}]}`)
	f.Add(`{"x":`)
	f.Add(`"""":::`)
	f.Fuzz(func(t *testing.T, doc string) {
		scanJSONKeys(doc, func(key, value string, isString bool) {
			if len(key) > len(doc) || len(value) > len(doc) {
				t.Fatalf("key %q or value %q longer than the document", key, value)
			}
		})
	})
}

// FuzzParseRuleSet checks that no rules document, however malformed, panics
// the parser or the compiler.
func FuzzParseRuleSet(f *testing.F) {
	f.Add(string(defaultRulesYAML[:2000]))
	f.Add("rules:\n  - id: x\n    when: [{status: [\"1-\"]}]\n    type: X\n")
	f.Add("lists: {a: [b]}\nrules: [{id: y, when: [{kind: [$a]}], type: UNKNOWN, recovery: r}]")
	f.Fuzz(func(t *testing.T, doc string) {
		rs, err := ParseRuleSet([]byte(doc), "fuzz.yaml")
		if err != nil {
			return
		}
		if c, err := New(rs); err == nil {
			c.Classify(&policydv1.Failure{HttpStatus: 500, Message: doc}, nil, "")
		}
	})
}

// FuzzStringEnd holds stringEnd, which jumps from quote to quote, to the
// plain reading: byte by byte, a backslash escaping the byte after it.
func FuzzStringEnd(f *testing.F) {
	for _, s := range []string{`abc"`, `a\"b"`, `a\\"b`, `\\\"x"`, `no end`, `\`, `"`} {
		f.Add(s, 0)
	}
	f.Fuzz(func(t *testing.T, doc string, from int) {
		if from < 0 || from > len(doc) {
			return
		}
		want := -1
		for i := from; i < len(doc); i++ {
			if doc[i] == '"' {
				want = i
				break
			}
			if doc[i] == '\\' {
				i++
			}
		}
		if got := stringEnd(doc, from); got != want {
			t.Errorf("stringEnd(%q, %d) = %d, want %d", doc, from, got, want)
		}
	})
}
