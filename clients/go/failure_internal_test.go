package policyd

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
)

// proto keeps a failure within policyd's request limits, so that a huge or
// binary error never becomes a refused request (and a fail-open decision).
func TestFailureProtoWithinLimits(t *testing.T) {
	t.Parallel()
	headers := map[string]string{"retry-after": "3", strings.Repeat("n", 300): "too long a name"}
	for i := range 150 {
		headers[fmt.Sprintf("x-h-%03d", i)] = strings.Repeat("v", 9<<10)
	}
	causes := make([]Cause, 80)
	for i := range causes {
		causes[i] = Cause{Name: "n", Code: "c", Message: strings.Repeat("m", 9<<10)}
	}
	f := &Failure{
		Body:       strings.Repeat("b", 100<<10) + "\xff",
		Message:    "bad \xff\xfe utf-8 " + strings.Repeat("é", 10<<10),
		Provider:   strings.Repeat("p", 9<<10),
		HTTPStatus: 1234,
		Headers:    headers,
		Causes:     causes,
	}
	pf := f.proto()
	if len(pf.GetBody()) != maxBodyBytes || len(pf.GetMessage()) > maxFieldBytes || len(pf.GetProvider()) != maxFieldBytes {
		t.Errorf("sizes: body %d, message %d, provider %d", len(pf.GetBody()), len(pf.GetMessage()), len(pf.GetProvider()))
	}
	if !utf8.ValidString(pf.GetMessage()) || !utf8.ValidString(pf.GetBody()) {
		t.Error("strings are not valid UTF-8")
	}
	if len(pf.GetHeaders()) != maxHeaders || pf.GetHeaders()["retry-after"] != "3" {
		t.Errorf("%d headers (retry-after %q), want %d with retry-after kept", len(pf.GetHeaders()), pf.GetHeaders()["retry-after"], maxHeaders)
	}
	for k, v := range pf.GetHeaders() {
		if len(k) > maxHeaderNameBytes || len(v) > maxFieldBytes {
			t.Errorf("header %.20q: name %d bytes, value %d bytes", k, len(k), len(v))
		}
	}
	if len(pf.GetCauses()) != maxCauses || len(pf.GetCauses()[0].GetMessage()) != maxFieldBytes {
		t.Errorf("%d causes, first message %d bytes", len(pf.GetCauses()), len(pf.GetCauses()[0].GetMessage()))
	}
	if pf.GetHttpStatus() != 0 {
		t.Errorf("http_status %d outside 100..999 kept", pf.GetHttpStatus())
	}
	if _, err := proto.Marshal(pf); err != nil {
		t.Errorf("the failure does not marshal: %v", err)
	}
}

func TestClipCutsAtRuneBoundary(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		n    int
		want string
	}{
		{name: "short", in: "abc", n: 5, want: "abc"},
		{name: "ascii", in: "abcdef", n: 3, want: "abc"},
		{name: "inside a rune", in: "aé", n: 2, want: "a"},
		{name: "invalid bytes replaced", in: "a\xffb", n: 10, want: "a\uFFFDb"},
	}
	for _, tt := range tests {
		if got := clip(tt.in, tt.n); got != tt.want {
			t.Errorf("%s: clip(%q, %d) = %q, want %q", tt.name, tt.in, tt.n, got, tt.want)
		}
	}
}
