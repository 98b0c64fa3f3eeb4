package policy

// The clients' shared vectors (clients/testdata, docs/clients.md) where
// policyd implements the same thing: delay hints in headers and operation
// safety. The clients must read them as policyd does.

import (
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

func readClientVectors(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile("../../clients/testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func TestClientVectorsRetryAfter(t *testing.T) {
	var v struct {
		Now   time.Time `json:"now"`
		Cases []struct {
			ID      string            `json:"id"`
			Daemon  *bool             `json:"daemon"`
			Headers map[string]string `json:"headers"`
			WantMs  *float64          `json:"want_ms"`
			// DaemonWantMs is policyd's reading where it differs from the
			// clients' own (a hint too long to wait is the longest hint).
			DaemonWantMs *float64 `json:"daemon_want_ms"`
		} `json:"cases"`
	}
	readClientVectors(t, "retry_after.json", &v)
	p := Builtin()
	n := 0
	for _, c := range v.Cases {
		if c.Daemon != nil && !*c.Daemon {
			continue
		}
		n++
		if c.DaemonWantMs != nil {
			c.WantMs = c.DaemonWantMs
		}
		cls := p.Classifier.ClassifyAt(&policydv1.Failure{Headers: c.Headers}, nil, DefaultProfile, v.Now)
		ra := cls.GetRetryAfter()
		switch {
		case c.WantMs == nil && ra != nil:
			t.Errorf("%s: retry_after %v (%s), want no hint", c.ID, ra.AsDuration(), cls.GetRetryAfterSource())
		case c.WantMs != nil && (ra == nil || math.Abs(float64(ra.AsDuration())/1e6-*c.WantMs) > 1):
			t.Errorf("%s: retry_after %v, want %vms", c.ID, ra.AsDuration(), *c.WantMs)
		}
	}
	if n == 0 {
		t.Fatal("no daemon cases")
	}
}

func TestClientVectorsSafety(t *testing.T) {
	var v struct {
		Cases []struct {
			ID        string `json:"id"`
			Operation string `json:"operation"`
			Method    string `json:"method"`
			Want      string `json:"want"`
		} `json:"cases"`
	}
	readClientVectors(t, "safety.json", &v)
	if len(v.Cases) == 0 {
		t.Fatal("no cases")
	}
	p := Builtin()
	for _, c := range v.Cases {
		req := &policydv1.NextDelayRequest{Failure: &policydv1.Failure{Operation: c.Operation, Method: c.Method}}
		// A profile with no idempotent methods of its own: the clients know none.
		got := strings.TrimPrefix(p.safety(req, &Profile{}).String(), "OPERATION_SAFETY_")
		if got != strings.ToUpper(c.Want) {
			t.Errorf("%s: safety(%q, %q) = %s, want %s", c.ID, c.Operation, c.Method, got, c.Want)
		}
	}
}
