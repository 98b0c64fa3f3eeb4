package policyd

// The shared client vectors (clients/testdata, docs/clients.md): the Python
// and TypeScript suites read the same files.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// vectorFile is a vector file: its cases, and what some files give all
// their cases (the time of the decision vectors, the target of the fleet's).
type vectorFile[C any] struct {
	Now    time.Time    `json:"now"`
	Target vectorTarget `json:"target"`
	Cases  []C          `json:"cases"`
}

func readVectors[C any](t *testing.T, name string) vectorFile[C] {
	t.Helper()
	b, err := os.ReadFile("../testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var v vectorFile[C]
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(v.Cases) == 0 {
		t.Fatalf("%s: no cases", name)
	}
	return v
}

func TestVectorsRetryAfter(t *testing.T) {
	v := readVectors[struct {
		ID      string            `json:"id"`
		Headers map[string]string `json:"headers"`
		WantMs  *float64          `json:"want_ms"`
	}](t, "retry_after.json")
	for _, c := range v.Cases {
		d, ok := RetryAfter(c.Headers, v.Now)
		switch {
		case c.WantMs == nil && ok:
			t.Errorf("%s: RetryAfter = %v, want no hint", c.ID, d)
		case c.WantMs != nil && (!ok || math.Abs(float64(d)/1e6-*c.WantMs) > 1):
			t.Errorf("%s: RetryAfter = %v, %v; want %vms", c.ID, d, ok, *c.WantMs)
		}
	}
}

func TestVectorsSafety(t *testing.T) {
	v := readVectors[struct {
		ID        string `json:"id"`
		Operation string `json:"operation"`
		Method    string `json:"method"`
		Want      string `json:"want"`
	}](t, "safety.json")
	for _, c := range v.Cases {
		if got := deriveSafety(c.Operation, c.Method).String(); got != strings.ToUpper(c.Want) {
			t.Errorf("%s: deriveSafety(%q, %q) = %s, want %s", c.ID, c.Operation, c.Method, got, c.Want)
		}
	}
}

type vectorFailure struct {
	HTTPStatus int               `json:"http_status"`
	Headers    map[string]string `json:"headers"`
	ErrorCode  string            `json:"error_code"`
	Causes     []Cause           `json:"causes"`
	GRPCCode   codes.Code        `json:"grpc_code"`
	Operation  string            `json:"operation"`
	Method     string            `json:"method"`
	Body       string            `json:"body"`
}

type vectorOutcome struct {
	Action      string `json:"action"`
	FailureType string `json:"failure_type"`
	Retryable   *bool  `json:"retryable"`
	StopReason  string `json:"stop_reason"`
	// AttemptsLeft is checked when given.
	AttemptsLeft *int `json:"attempts_left"`
	DelayMs      *struct {
		Min, Max float64
	} `json:"delay_ms"`
}

// fixedRand draws r every time.
type fixedRand float64

func (r fixedRand) Float64() float64 { return float64(r) }

// checkFailOpen decides with the default policy at draws 0 and just under 1
// and checks the outcome and the delay bounds.
func checkFailOpen(t *testing.T, id string, f *Failure, attempt int, safety Safety, now, deadline time.Time, want vectorOutcome) {
	t.Helper()
	for _, r := range []float64{0, 1 - 1e-9} {
		d := DefaultFailOpenPolicy.Decide(f, attempt, safety, now, deadline, fixedRand(r))
		if strings.ToLower(d.Action.String()) != want.Action || d.FailureType.String() != want.FailureType ||
			(want.Retryable != nil && d.Retryable != *want.Retryable) ||
			(want.StopReason != "" && d.StopReason.String() != want.StopReason) ||
			(want.AttemptsLeft != nil && d.AttemptsLeft != *want.AttemptsLeft) {
			t.Errorf("%s (draw %g): got %v %v retryable=%v %v (%s) attempts left %d; want %+v",
				id, r, d.Action, d.FailureType, d.Retryable, d.StopReason, d.StopText, d.AttemptsLeft, want)
			continue
		}
		if want.DelayMs != nil {
			bound := want.DelayMs.Min
			if r > 0 {
				bound = want.DelayMs.Max
			}
			if ms := float64(d.Delay) / 1e6; math.Abs(ms-bound) > 1 {
				t.Errorf("%s (draw %g): delay %v, want %vms", id, r, d.Delay, bound)
			}
		}
	}
}

func TestVectorsFailOpen(t *testing.T) {
	v := readVectors[struct {
		ID         string        `json:"id"`
		Failure    vectorFailure `json:"failure"`
		Attempt    int           `json:"attempt"`
		Safety     string        `json:"safety"`
		DeadlineMs *int64        `json:"deadline_ms"`
		Want       vectorOutcome `json:"want"`
	}](t, "fail_open.json")
	safeties := map[string]Safety{"": SafetyUnspecified, "safe": SafetySafe, "conditional": SafetyConditional, "irreversible": SafetyIrreversible}
	for _, c := range v.Cases {
		vf := c.Failure
		f := &Failure{
			HTTPStatus: vf.HTTPStatus, Headers: vf.Headers, ErrorCode: vf.ErrorCode, Causes: vf.Causes,
			GRPCCode: vf.GRPCCode, Operation: vf.Operation, Method: vf.Method, Body: vf.Body,
		}
		var deadline time.Time
		if c.DeadlineMs != nil {
			deadline = v.Now.Add(time.Duration(*c.DeadlineMs) * time.Millisecond)
		}
		checkFailOpen(t, c.ID, f, c.Attempt, safeties[c.Safety], v.Now, deadline, c.Want)
	}
}

// nativeError builds the Go error a language-neutral native describes.
func nativeError(t *testing.T, n map[string]any) error {
	t.Helper()
	switch n["kind"] {
	case "http_response":
		h := http.Header{}
		for _, p := range n["headers"].([]any) {
			kv := p.([]any)
			h.Add(kv[0].(string), kv[1].(string))
		}
		status := int(n["status"].(float64))
		return NewHTTPError(&http.Response{
			StatusCode: status, Status: fmt.Sprint(status), Header: h,
			Body:    io.NopCloser(strings.NewReader(n["body"].(string))),
			Request: &http.Request{Method: n["method"].(string)},
		})
	case "errno":
		errno := map[string]syscall.Errno{"ECONNRESET": syscall.ECONNRESET, "ECONNREFUSED": syscall.ECONNREFUSED}[n["code"].(string)]
		return &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", errno)}
	case "timeout":
		return &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	case "dns_not_found":
		return &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "x.invalid", IsNotFound: true}}
	case "canceled":
		return fmt.Errorf("calling the model: %w", context.Canceled)
	case "grpc_status":
		return status.Error(codes.Code(n["code"].(float64)), "upstream")
	}
	t.Fatalf("unknown native kind %v", n["kind"])
	return nil
}

func TestVectorsErrorMapping(t *testing.T) {
	v := readVectors[struct {
		ID     string         `json:"id"`
		Native map[string]any `json:"native"`
		Want   struct {
			Failure  map[string]any `json:"failure"`
			FailOpen vectorOutcome  `json:"fail_open"`
		} `json:"want"`
	}](t, "error_mapping.json")
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range v.Cases {
		f := FailureFromError(nativeError(t, c.Native))
		// Only the fields a vector names must agree across languages.
		got := map[string]any{"http_status": float64(f.HTTPStatus), "error_code": f.ErrorCode,
			"grpc_code": float64(f.GRPCCode), "method": f.Method, "body": f.Body}
		for k, want := range c.Want.Failure {
			if k == "headers" {
				for name, value := range want.(map[string]any) {
					if f.Headers[name] != value {
						t.Errorf("%s: header %s = %q, want %q", c.ID, name, f.Headers[name], value)
					}
				}
			} else if got[k] != want {
				t.Errorf("%s: %s = %v, want %v", c.ID, k, got[k], want)
			}
		}
		checkFailOpen(t, c.ID, f, 1, SafetyUnspecified, now, time.Time{}, c.Want.FailOpen)
	}
}

func TestVectorsAddress(t *testing.T) {
	v := readVectors[struct {
		Addr   string `json:"addr"`
		Target string `json:"target"`
		TLS    bool   `json:"tls"`
		Error  bool   `json:"error"`
	}](t, "address.json")
	for _, c := range v.Cases {
		a, err := parseAddress(c.Addr)
		switch {
		case c.Error && err == nil:
			t.Errorf("parseAddress(%q) = %+v, want an error", c.Addr, a)
		case !c.Error && err != nil:
			t.Errorf("parseAddress(%q): %v", c.Addr, err)
		case !c.Error && (a.target != c.Target || a.tls != c.TLS):
			t.Errorf("parseAddress(%q) = %q tls=%v, want %q tls=%v", c.Addr, a.target, a.tls, c.Target, c.TLS)
		}
	}
}

// TestDialRefusesAddress: a malformed POLICYD_ADDR is Dial's error, naming
// the variable, not an outage the client fails open on.
func TestDialRefusesAddress(t *testing.T) {
	t.Setenv(EnvAddr, "grpc://127.0.0.1:7433")
	_, err := Dial("")
	if err == nil || !strings.Contains(err.Error(), EnvAddr) || !strings.Contains(err.Error(), "scheme") {
		t.Fatalf("Dial with %s=grpc://…: %v, want an error naming the variable and the scheme", EnvAddr, err)
	}
}

func TestVectorsDefaultAgent(t *testing.T) {
	v := readVectors[struct {
		Program string `json:"program"`
		Agent   string `json:"agent"`
	}](t, "agent.json")
	for _, c := range v.Cases {
		if got := defaultAgent(c.Program); got != c.Agent {
			t.Errorf("defaultAgent(%q) = %q, want %q", c.Program, got, c.Agent)
		}
	}
}

func TestVectorsRefusals(t *testing.T) {
	v := readVectors[struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Raise   bool   `json:"raise"`
	}](t, "refusals.json")
	byName := map[string]codes.Code{}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		byName[strings.ToUpper(strings.ReplaceAll(snake(c.String()), " ", "_"))] = c
	}
	for _, c := range v.Cases {
		code, ok := byName[c.Code]
		if !ok {
			t.Fatalf("unknown code %q", c.Code)
		}
		if got := callerMistake(code, c.Message); got != c.Raise {
			t.Errorf("callerMistake(%s, %q) = %v, want %v", c.Code, c.Message, got, c.Raise)
		}
	}
}

// snake turns grpc-go's code names (InvalidArgument) into the wire names'
// spelling (INVALID_ARGUMENT, after ToUpper).
func snake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return b.String()
}
