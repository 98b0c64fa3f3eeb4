package server

import (
	"bytes"
	"context"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/policy"
)

// logBuffer is a bytes.Buffer safe for the server's goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *logBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *logBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startLoggedServer is startServer logging at debug, as JSON, into the
// returned buffer.
func startLoggedServer(t *testing.T) (*grpc.ClientConn, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ps := NewPolicyServer(policy.Builtin(), WithClock(func() time.Time { return testNow }), WithRand(fixedRand(0.5)))
	return serveTest(t, ps, logger).conn, logs
}

var generatedID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// TestRequestID: a valid x-request-id is echoed in the response header and
// logged with the call; a missing or invalid one is replaced by a generated
// id, echoed and logged the same way, on success and on error.
func TestRequestID(t *testing.T) {
	t.Parallel()
	conn, logs := startLoggedServer(t)
	client := policydv1.NewPolicyServiceClient(conn)
	tests := []struct {
		name     string
		sent     []string // x-request-id values sent; none: no header
		fail     bool     // a bad http_status makes the call fail with InvalidArgument
		wantEcho bool     // the sent id comes back; else a generated one
	}{
		{name: "client id", sent: []string{"req-7f3a.b_c:42"}, wantEcho: true},
		{name: "client id on an error", sent: []string{"req-failing-call"}, fail: true, wantEcho: true},
		{name: "longest client id", sent: []string{strings.Repeat("r", MaxRequestIDLen)}, wantEcho: true},
		{name: "none"},
		{name: "none on an error", fail: true},
		{name: "too long", sent: []string{strings.Repeat("r", MaxRequestIDLen+1)}},
		{name: "space", sent: []string{"two words"}},
		{name: "empty", sent: []string{""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			for _, v := range tt.sent {
				ctx = metadata.AppendToOutgoingContext(ctx, RequestIDHeader, v)
			}
			var header metadata.MD
			f, wantCode := &policydv1.Failure{HttpStatus: 503}, codes.OK
			if tt.fail {
				f.HttpStatus, wantCode = 42, codes.InvalidArgument
			}
			_, err := client.Classify(ctx, &policydv1.ClassifyRequest{Failure: f}, grpc.Header(&header))
			if status.Code(err) != wantCode {
				t.Fatalf("Classify: %v, want %v", err, wantCode)
			}
			got := header.Get(RequestIDHeader)
			if len(got) != 1 {
				t.Fatalf("response header %s = %q, want one value", RequestIDHeader, got)
			}
			switch {
			case tt.wantEcho && got[0] != tt.sent[0]:
				t.Errorf("request id = %q, want the client's %q", got[0], tt.sent[0])
			case !tt.wantEcho && !generatedID.MatchString(got[0]):
				t.Errorf("request id = %q, want a generated one (32 hex digits)", got[0])
			}
			// The call's log lines carry the id (debug for a success, info
			// for InvalidArgument).
			if want := `"request_id":"` + got[0] + `"`; !strings.Contains(logs.String(), want) {
				t.Errorf("no log line with %s in:\n%s", want, logs.String())
			}
		})
	}
}

// TestRequestIDsDiffer: two failed calls without an id get different ones.
func TestRequestIDsDiffer(t *testing.T) {
	t.Parallel()
	client := policydv1.NewPolicyServiceClient(startServer(t))
	seen := map[string]bool{}
	for range 3 {
		var header metadata.MD
		_, err := client.GetProfile(testContext(t), &policydv1.GetProfileRequest{Name: "nope"}, grpc.Header(&header))
		if status.Code(err) != codes.NotFound {
			t.Fatalf("GetProfile: %v, want NotFound", err)
		}
		id := header.Get(RequestIDHeader)
		if len(id) != 1 || seen[id[0]] {
			t.Fatalf("request ids %q after %v: want a new one per call", id, seen)
		}
		seen[id[0]] = true
	}
}

// TestRequestIDHeaderAtInfo: below debug a successful call leaves no log
// line, so a generated id is not sent; a client's id is echoed anyway, and
// a failed call's id is sent.
func TestRequestIDHeaderAtInfo(t *testing.T) {
	t.Parallel()
	client := policydv1.NewPolicyServiceClient(startServer(t)) // logs at no level
	tests := []struct {
		name string
		sent string
		fail bool
		want string // "": no header; "generated": 32 hex digits
	}{
		{name: "success, no id", want: ""},
		{name: "success, client id", sent: "req-1", want: "req-1"},
		{name: "failure, no id", fail: true, want: "generated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			if tt.sent != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, RequestIDHeader, tt.sent)
			}
			f := &policydv1.Failure{HttpStatus: 503}
			if tt.fail {
				f.HttpStatus = 42
			}
			var header metadata.MD
			_, err := client.Classify(ctx, &policydv1.ClassifyRequest{Failure: f}, grpc.Header(&header))
			if (err != nil) != tt.fail {
				t.Fatalf("Classify: %v, want failure %v", err, tt.fail)
			}
			got := header.Get(RequestIDHeader)
			switch {
			case tt.want == "" && len(got) != 0:
				t.Errorf("response header %s = %q, want none", RequestIDHeader, got)
			case tt.want == "generated" && (len(got) != 1 || !generatedID.MatchString(got[0])):
				t.Errorf("response header %s = %q, want a generated id", RequestIDHeader, got)
			case tt.want != "" && tt.want != "generated" && (len(got) != 1 || got[0] != tt.want):
				t.Errorf("response header %s = %q, want %q", RequestIDHeader, got, tt.want)
			}
		})
	}
}

// TestRequestIDInHandlerLogs: a record the server logs with the call's
// context (here: a handler error mapped to Internal) carries request_id.
func TestRequestIDInHandlerLogs(t *testing.T) {
	t.Parallel()
	logs := &logBuffer{}
	h := requestIDHandler{slog.NewJSONHandler(logs, nil)}
	ctx := context.WithValue(context.Background(), requestIDKey{}, "abc123")
	slog.New(h).With("k", "v").WithGroup("g").InfoContext(ctx, "in a call")
	slog.New(h).InfoContext(context.Background(), "outside a call")
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"request_id":"abc123"`) || strings.Contains(lines[1], "request_id") {
		t.Errorf("log lines:\n%s\nwant request_id on the first only", logs.String())
	}
}

// TestValidRequestID covers what a gRPC client library will not send
// (control and non-ASCII bytes) but a raw HTTP/2 client could.
func TestValidRequestID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		id   string
		want bool
	}{
		{name: "uuid", id: "3f2a9c1e-7b4d-4e8a-9f00-1234567890ab", want: true},
		{name: "punctuation", id: "a.b_c:d/e=f~!", want: true},
		{name: "max length", id: strings.Repeat("x", MaxRequestIDLen), want: true},
		{name: "empty", id: ""},
		{name: "too long", id: strings.Repeat("x", MaxRequestIDLen+1)},
		{name: "space", id: "a b"},
		{name: "tab", id: "a\tb"},
		{name: "newline", id: "a\nlevel=ERROR msg=forged"},
		{name: "DEL", id: "a\x7f"},
		{name: "non-ASCII", id: "idé"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := validRequestID(tt.id); got != tt.want {
				t.Errorf("validRequestID(%q) = %v, want %v", tt.id, got, tt.want)
			}
		})
	}
}
