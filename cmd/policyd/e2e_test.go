package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

// binDir holds the policyd binary built for this test binary's e2e tests.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "policyd-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildPolicyd builds the policyd binary once, on first use.
var buildPolicyd = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(binDir, "policyd")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %w\n%s", err, out)
	}
	return bin, nil
})

func policydBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping end-to-end test in short mode")
	}
	bin, err := buildPolicyd()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// lockedBuffer collects a process's output from a reading goroutine.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) WriteLine(line []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(line)
	b.buf.WriteByte('\n')
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestServeE2E(t *testing.T) {
	t.Parallel()
	bin := policydBinary(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--log-format", "json")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Read stderr to EOF (process exit), watching for the "serving" record.
	var logs lockedBuffer
	addrc := make(chan string, 1)
	eof := make(chan struct{})
	go func() {
		defer close(eof)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			logs.WriteLine(sc.Bytes())
			var rec struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "serving" {
				addrc <- rec.Addr
			}
		}
	}()
	var waitErr error
	exited := make(chan struct{})
	go func() {
		<-eof
		waitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // no-op once it has exited
		<-exited
	})

	var addr string
	select {
	case addr = <-addrc:
	case <-exited:
		t.Fatalf("policyd exited before serving: %v\n%s", waitErr, logs.String())
	case <-ctx.Done():
		t.Fatalf("no serving record:\n%s", logs.String())
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	t.Run("classify", func(t *testing.T) {
		resp, err := policydv1.NewPolicyServiceClient(conn).Classify(ctx, &policydv1.ClassifyRequest{Failure: &policydv1.Failure{
			Provider:   "anthropic",
			HttpStatus: 529,
			Body:       `{"type":"error","error":{"type":"overloaded_error","message":"Anthropic's API is temporarily overloaded"}}`,
		}})
		if status.Code(err) != codes.OK {
			t.Fatalf("Classify: %v", err)
		}
		c := resp.GetClassification()
		if c.GetFailureType() != policydv1.FailureType_FAILURE_TYPE_OVERLOADED || !c.GetRetryable() || c.GetRule() != "overloaded" {
			t.Errorf("got %v retryable=%v rule=%q, want FAILURE_TYPE_OVERLOADED retryable rule \"overloaded\"",
				c.GetFailureType(), c.GetRetryable(), c.GetRule())
		}
	})
	t.Run("classify invalid", func(t *testing.T) {
		_, err := policydv1.NewPolicyServiceClient(conn).Classify(ctx, &policydv1.ClassifyRequest{})
		if got := status.Code(err); got != codes.InvalidArgument {
			t.Errorf("code = %v, want InvalidArgument", got)
		}
	})
	t.Run("health", func(t *testing.T) {
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "policyd.v1.PolicyService"})
		if status.Code(err) != codes.OK {
			t.Fatalf("Check: %v", err)
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("status = %v, want SERVING", resp.GetStatus())
		}
	})
	t.Run("reflection", func(t *testing.T) {
		stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&reflectionpb.ServerReflectionRequest{
			MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
		}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if status.Code(err) != codes.OK {
			t.Fatalf("Recv: %v", err)
		}
		_ = stream.CloseSend()
		got := map[string]bool{}
		for _, s := range resp.GetListServicesResponse().GetService() {
			got[s.GetName()] = true
		}
		for _, want := range []string{"policyd.v1.PolicyService", "grpc.health.v1.Health"} {
			if !got[want] {
				t.Errorf("reflection lists %v, missing %s", got, want)
			}
		}
	})

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Fatalf("policyd after SIGTERM: %v\n%s", waitErr, logs.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("policyd still running 10s after SIGTERM\n%s", logs.String())
	}
}

func TestClassifyCommandE2E(t *testing.T) {
	t.Parallel()
	bin := policydBinary(t)
	tests := []struct {
		name       string
		args       []string
		stdin      string // empty: /dev/null
		wantCode   int
		wantType   policydv1.FailureType // checked when wantCode is 0 and set
		wantStdout string                // a substring, when set
		wantStderr string                // a substring, when set
	}{
		{
			name:     "json names on stdin",
			args:     []string{"classify"},
			stdin:    `{"failure":{"httpStatus":429,"headers":{"retry-after":"7"}},"profile":"default"}`,
			wantType: policydv1.FailureType_FAILURE_TYPE_RATE_LIMIT,
		},
		{
			name:     "proto names with --stdin",
			args:     []string{"classify", "--stdin"},
			stdin:    `{"failure":{"http_status":529,"body":"{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}"}}`,
			wantType: policydv1.FailureType_FAILURE_TYPE_OVERLOADED,
		},
		{
			name:     "flags",
			args:     []string{"classify", "--status", "429", "--header", "retry-after: 7"},
			wantType: policydv1.FailureType_FAILURE_TYPE_RATE_LIMIT,
		},
		{name: "bad flag value", args: []string{"classify", "--status", "abc"}, wantCode: 2, wantStderr: "--status"},
		{name: "invalid flag value", args: []string{"classify", "--status", "1000"}, wantCode: 2, wantStderr: "--status"},
		{name: "bad phase", args: []string{"classify", "--phase", "later"}, wantCode: 2, wantStderr: "--phase"},
		{name: "bad json", args: []string{"classify"}, stdin: `{"failure":`, wantCode: 2, wantStderr: "stdin"},
		{name: "unknown json field", args: []string{"classify"}, stdin: `{"failure":{"nope":1}}`, wantCode: 2, wantStderr: "stdin"},
		{name: "json without failure", args: []string{"classify"}, stdin: `{}`, wantCode: 2, wantStderr: "failure: required"},
		{name: "no input", args: []string{"classify"}, wantCode: 2},
		{name: "version", args: []string{"version"}, wantStdout: "policyd dev go"},
		{name: "help", args: []string{"help"}, wantStdout: "Commands:"},
		{name: "command help", args: []string{"classify", "--help"}, wantStdout: "--status"},
		{name: "unknown command", args: []string{"bogus"}, wantCode: 2, wantStderr: "Usage:"},
		{name: "no command", args: nil, wantCode: 2, wantStderr: "Usage:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, tt.args...)
			if tt.stdin != "" {
				cmd.Stdin = strings.NewReader(tt.stdin)
			}
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil && cmd.ProcessState == nil {
				t.Fatal(err)
			}
			if got := cmd.ProcessState.ExitCode(); got != tt.wantCode {
				t.Fatalf("exit code = %d, want %d\nstdout: %s\nstderr: %s", got, tt.wantCode, &stdout, &stderr)
			}
			if !strings.Contains(stdout.String(), tt.wantStdout) {
				t.Errorf("stdout %q does not contain %q", &stdout, tt.wantStdout)
			}
			if !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("stderr %q does not contain %q", &stderr, tt.wantStderr)
			}
			if tt.wantType != policydv1.FailureType_FAILURE_TYPE_UNSPECIFIED {
				var resp policydv1.ClassifyResponse
				if err := protojson.Unmarshal(stdout.Bytes(), &resp); err != nil {
					t.Fatalf("stdout is not a JSON ClassifyResponse: %v\n%s", err, &stdout)
				}
				if got := resp.GetClassification().GetFailureType(); got != tt.wantType {
					t.Errorf("failure type = %v, want %v", got, tt.wantType)
				}
			}
		})
	}
}
