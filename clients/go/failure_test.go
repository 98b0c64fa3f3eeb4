package policyd_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/anypb"

	policyd "github.com/policyd/policyd/clients/go"
	policydv1 "github.com/policyd/policyd/clients/go/internal/gen/policyd/v1"
)

// Each case makes a real error the way a Go agent meets it (a refused dial,
// a reset or dropped connection, a timeout, a truncated body, a gRPC
// failure, an HTTP response), maps it with FailureFromError, checks the
// fields, and asks the real policyd what the failure is: the mapping is
// right when policyd's rules read it right.
func TestFailureFromError(t *testing.T) {
	t.Parallel()
	c := newClient(t, daemonAddr(t))

	tests := []struct {
		name     string
		err      func(t *testing.T) error
		profile  string
		op       string
		check    func(t *testing.T, f *policyd.Failure)
		wantType policyd.FailureType
		retry    bool
	}{
		{
			name: "connection refused",
			err: func(t *testing.T) error {
				_, err := http.Get("http://" + closedAddr(t) + "/")
				return err
			},
			check: func(t *testing.T, f *policyd.Failure) {
				want(t, "ErrorCode", f.ErrorCode, "ECONNREFUSED")
				want(t, "ErrorName", f.ErrorName, "*url.Error")
				want(t, "Method", f.Method, "GET")
				want(t, "HTTPStatus", f.HTTPStatus, 0)
			},
			wantType: policyd.FailureTypeConnectionError, retry: true,
		},
		{
			name: "connection reset by peer",
			err: func(t *testing.T) error {
				addr := resetServer(t)
				_, err := http.Post("http://"+addr+"/", "text/plain", strings.NewReader("hi"))
				return err
			},
			check: func(t *testing.T, f *policyd.Failure) {
				want(t, "ErrorCode", f.ErrorCode, "ECONNRESET")
				want(t, "Method", f.Method, "POST")
			},
			wantType: policyd.FailureTypeConnectionError, retry: true,
		},
		{
			name: "dropped connection (EOF before a response)",
			err: func(t *testing.T) error {
				srv := newFlaky(t, step{drop: true})
				_, err := http.Get(srv.URL)
				return err
			},
			check: func(t *testing.T, f *policyd.Failure) {
				want(t, "ErrorCode", f.ErrorCode, "ECONNRESET")
				if !hasCause(f, "io.EOF") {
					t.Errorf("causes %+v lack io.EOF", f.Causes)
				}
			},
			wantType: policyd.FailureTypeConnectionError, retry: true,
		},
		{
			name: "body cut short (io.ErrUnexpectedEOF)",
			err: func(t *testing.T) error {
				addr := truncatingServer(t)
				resp, err := http.Get("http://" + addr + "/")
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				_, err = io.ReadAll(resp.Body)
				return fmt.Errorf("read the answer: %w", err)
			},
			check: func(t *testing.T, f *policyd.Failure) {
				want(t, "ErrorCode", f.ErrorCode, "ECONNRESET")
				want(t, "ErrorName", f.ErrorName, "io.ErrUnexpectedEOF")
			},
			wantType: policyd.FailureTypeConnectionError, retry: true,
		},
		{
			name: "http.Client timeout",
			err: func(t *testing.T) error {
				srv := newFlaky(t, step{delay: 5 * time.Second})
				_, err := (&http.Client{Timeout: 50 * time.Millisecond}).Get(srv.URL)
				return err
			},
			check:    func(t *testing.T, f *policyd.Failure) { want(t, "ErrorCode", f.ErrorCode, "ETIMEDOUT") },
			wantType: policyd.FailureTypeTimeout, retry: true,
		},
		{
			// An SDK's own error type that says it timed out, without being a
			// net.Error (the AWS SDK's retryer tests use such a mock).
			name: "a wrapped error with Timeout() true",
			err: func(t *testing.T) error {
				return fmt.Errorf("some error: %w", timeoutOnly{})
			},
			check:    func(t *testing.T, f *policyd.Failure) { want(t, "ErrorCode", f.ErrorCode, "ETIMEDOUT") },
			wantType: policyd.FailureTypeTimeout, retry: true,
		},
		{
			name: "net.Conn deadline (os.ErrDeadlineExceeded)",
			err: func(t *testing.T) error {
				srv := newFlaky(t, step{delay: 5 * time.Second})
				conn, err := net.Dial("tcp", srv.Listener.Addr().String())
				if err != nil {
					return err
				}
				defer conn.Close()
				_ = conn.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
				_, err = conn.Read(make([]byte, 1))
				return err
			},
			check: func(t *testing.T, f *policyd.Failure) {
				want(t, "ErrorCode", f.ErrorCode, "ETIMEDOUT")
				want(t, "ErrorName", f.ErrorName, "*net.OpError")
			},
			wantType: policyd.FailureTypeTimeout, retry: true,
		},
		{
			name: "context deadline exceeded",
			err: func(t *testing.T) error {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
				defer cancel()
				srv := newFlaky(t, step{delay: 5 * time.Second})
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
				_, err := http.DefaultClient.Do(req)
				return err
			},
			check: func(t *testing.T, f *policyd.Failure) {
				if !hasCause(f, "context.DeadlineExceeded") {
					t.Errorf("causes %+v lack context.DeadlineExceeded", f.Causes)
				}
			},
			wantType: policyd.FailureTypeTimeout, retry: true,
		},
		{
			name: "context canceled",
			err: func(t *testing.T) error {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+closedAddr(t)+"/", nil)
				_, err := http.DefaultClient.Do(req)
				return err
			},
			check: func(t *testing.T, f *policyd.Failure) {
				if !hasCause(f, "context.Canceled") {
					t.Errorf("causes %+v lack context.Canceled", f.Causes)
				}
			},
			wantType: policyd.FailureTypeCanceled, retry: false,
		},
		{
			name: "bare syscall.Errno EPIPE",
			err:  func(*testing.T) error { return fmt.Errorf("write: %w", syscall.EPIPE) },
			check: func(t *testing.T, f *policyd.Failure) {
				want(t, "ErrorCode", f.ErrorCode, "EPIPE")
				want(t, "ErrorName", f.ErrorName, "syscall.Errno")
			},
			wantType: policyd.FailureTypeConnectionError, retry: true,
		},
		{
			name: "DNS: temporary failure",
			err: func(*testing.T) error {
				return &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "server misbehaving", Name: "api.example", IsTemporary: true}}
			},
			check:    func(t *testing.T, f *policyd.Failure) { want(t, "ErrorCode", f.ErrorCode, "EAI_AGAIN") },
			wantType: policyd.FailureTypeConnectionError, retry: true,
		},
		{
			name: "DNS: no such host",
			err: func(*testing.T) error {
				return &net.DNSError{Err: "no such host", Name: "api.example", IsNotFound: true}
			},
			check:    func(t *testing.T, f *policyd.Failure) { want(t, "ErrorCode", f.ErrorCode, "ENOTFOUND") },
			wantType: policyd.FailureTypeConnectionError, retry: true,
		},
		{
			name: "gRPC UNAVAILABLE from a real call",
			err: func(t *testing.T) error {
				conn, err := grpc.NewClient(closedAddr(t), grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					return err
				}
				defer conn.Close()
				_, err = policydv1.NewPolicyServiceClient(conn).ListProfiles(context.Background(), &policydv1.ListProfilesRequest{})
				return fmt.Errorf("upstream: %w", err)
			},
			// The status message says "connection refused", which policyd reads first.
			check:    func(t *testing.T, f *policyd.Failure) { want(t, "GRPCCode", f.GRPCCode, codes.Unavailable) },
			wantType: policyd.FailureTypeConnectionError, retry: true,
		},
		{
			name:     "gRPC UNAVAILABLE from a server",
			err:      func(*testing.T) error { return status.Error(codes.Unavailable, "the model is warming up") },
			check:    func(t *testing.T, f *policyd.Failure) { want(t, "GRPCCode", f.GRPCCode, codes.Unavailable) },
			wantType: policyd.FailureTypeOverloaded, retry: true,
		},
		{
			name: "gRPC RESOURCE_EXHAUSTED with RetryInfo",
			err: func(*testing.T) error {
				return withRetryInfo(status.New(codes.ResourceExhausted, "slow down"), 1500*time.Millisecond)
			},
			check: func(t *testing.T, f *policyd.Failure) {
				want(t, "GRPCCode", f.GRPCCode, codes.ResourceExhausted)
				want(t, "retry-after-ms header", f.Headers["retry-after-ms"], "1500")
			},
			wantType: policyd.FailureTypeRateLimit, retry: true,
		},
		{
			name: "HTTP 429 with headers and body",
			err: func(t *testing.T) error {
				srv := newFlaky(t, step{status: 429, headers: map[string]string{"Retry-After": "7", "X-Request-Id": "r1"}, body: rateLimitBody})
				resp, err := http.Post(srv.URL+"/v1/chat?key=secret", "application/json", strings.NewReader("{}"))
				if err != nil {
					return err
				}
				return policyd.CheckResponse(resp)
			},
			check: func(t *testing.T, f *policyd.Failure) {
				want(t, "HTTPStatus", f.HTTPStatus, 429)
				want(t, "Method", f.Method, "POST")
				want(t, "retry-after", f.Headers["retry-after"], "7")
				want(t, "Body", f.Body, rateLimitBody)
				want(t, "Message", f.Message, "") // the body says more
			},
			wantType: policyd.FailureTypeRateLimit, retry: true,
		},
		{
			name: "HTTP 401 wrapped",
			err: func(t *testing.T) error {
				srv := newFlaky(t, step{status: 401, body: badKeyBody})
				resp, err := http.Get(srv.URL)
				if err != nil {
					return err
				}
				return fmt.Errorf("list models: %w", policyd.CheckResponse(resp))
			},
			check: func(t *testing.T, f *policyd.Failure) {
				want(t, "HTTPStatus", f.HTTPStatus, 401)
				if !strings.HasPrefix(f.Message, "list models: GET http://127.0.0.1:") {
					t.Errorf("Message = %q, want the wrapped error's message", f.Message)
				}
			},
			wantType: policyd.FailureTypeAuthInvalid, retry: false,
		},
		{
			name:     "task code",
			op:       "task",
			profile:  "task_runner",
			err:      func(*testing.T) error { return policyd.WithCode(errors.New("3 tests failed"), "TEST_FAILURE") },
			check:    func(t *testing.T, f *policyd.Failure) { want(t, "ErrorCode", f.ErrorCode, "TEST_FAILURE") },
			wantType: policyd.FailureTypeTaskTransient, retry: true,
		},
		{
			name:     "invalid stream code",
			op:       "chat.stream",
			err:      func(*testing.T) error { return &policyd.CodeError{Code: "NO_FINISH_REASON"} },
			check:    func(t *testing.T, f *policyd.Failure) { want(t, "ErrorCode", f.ErrorCode, "NO_FINISH_REASON") },
			wantType: policyd.FailureTypeInvalidStream, retry: true,
		},
		{
			name: "connection reset mid-stream",
			op:   "chat.stream",
			err: func(*testing.T) error {
				return policyd.MidStream(&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)})
			},
			check: func(t *testing.T, f *policyd.Failure) {
				want(t, "Phase", f.Phase, policyd.PhaseMidStream)
				want(t, "ErrorCode", f.ErrorCode, "ECONNRESET")
			},
			wantType: policyd.FailureTypeStreamInterrupted, retry: true,
		},
		{
			name: "errors.Join keeps every branch",
			err: func(*testing.T) error {
				return errors.Join(errors.New("cleanup failed"), fmt.Errorf("dial: %w", syscall.ECONNREFUSED))
			},
			check: func(t *testing.T, f *policyd.Failure) {
				want(t, "ErrorCode", f.ErrorCode, "ECONNREFUSED")
				want(t, "ErrorName", f.ErrorName, "*errors.errorString")
			},
			wantType: policyd.FailureTypeConnectionError, retry: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.err(t)
			if err == nil {
				t.Fatal("the case made no error")
			}
			f := policyd.FailureFromError(err)
			tt.check(t, f)
			if f.Message == "" && f.HTTPStatus == 0 {
				t.Errorf("Message is empty for %v", err)
			}
			f.Operation = tt.op
			cls, cerr := c.Classify(context.Background(), f, tt.profile)
			if cerr != nil {
				t.Fatalf("Classify: %v", cerr)
			}
			if cls.FailureType != tt.wantType || cls.Retryable != tt.retry {
				t.Errorf("policyd reads %v (rule %s, retryable %v) from %+v; want %v, retryable %v",
					cls.FailureType, cls.Rule, cls.Retryable, f, tt.wantType, tt.retry)
			}
		})
	}
}

func TestFailureFromErrorNil(t *testing.T) {
	t.Parallel()
	if f := policyd.FailureFromError(nil); f != nil {
		t.Errorf("FailureFromError(nil) = %+v, want nil", f)
	}
}

func want[T comparable](t *testing.T, field string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", field, got, want)
	}
}

func hasCause(f *policyd.Failure, name string) bool {
	for _, c := range f.Causes {
		if c.Name == name {
			return true
		}
	}
	return false
}

// resetServer accepts connections and resets them (SO_LINGER 0) once the
// request has arrived.
func resetServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = conn.Read(make([]byte, 4096))
			_ = conn.(*net.TCPConn).SetLinger(0)
			conn.Close()
		}
	}()
	return l.Addr().String()
}

// truncatingServer answers with a Content-Length of 100 and sends 5 bytes.
func truncatingServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = conn.Read(make([]byte, 4096))
			_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhello")
			conn.Close()
		}
	}()
	return l.Addr().String()
}

// withRetryInfo returns st's error with a google.rpc.RetryInfo detail,
// encoded by hand as a server would send it.
func withRetryInfo(st *status.Status, d time.Duration) error {
	var dur []byte
	dur = protowire.AppendTag(dur, 1, protowire.VarintType)
	dur = protowire.AppendVarint(dur, uint64(d/time.Second))
	dur = protowire.AppendTag(dur, 2, protowire.VarintType)
	dur = protowire.AppendVarint(dur, uint64(d%time.Second))
	var info []byte
	info = protowire.AppendTag(info, 1, protowire.BytesType)
	info = protowire.AppendBytes(info, dur)
	p := st.Proto()
	p.Details = append(p.Details, &anypb.Any{TypeUrl: "type.googleapis.com/google.rpc.RetryInfo", Value: info})
	return status.FromProto(p).Err()
}

// timeoutOnly is an error whose only word on its nature is Timeout().
type timeoutOnly struct{}

func (timeoutOnly) Error() string { return "mock timeout true" }
func (timeoutOnly) Timeout() bool { return true }
