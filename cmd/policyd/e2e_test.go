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
	"github.com/policyd/policyd/internal/journal/journaltest"
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
	code := journaltest.Run(m)
	_ = os.RemoveAll(dir)
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

// daemon is a running `policyd serve`.
type daemon struct {
	cmd     *exec.Cmd
	addr    string
	logs    *lockedBuffer // stderr, JSON records
	exited  chan struct{} // closed once the process has exited
	waitErr error         // cmd.Wait's error, set before exited closes
}

// startDaemon runs `policyd serve --listen 127.0.0.1:0 --log-format json`
// with args and waits for its "serving" record; the process is killed when
// the test ends.
func startDaemon(t *testing.T, ctx context.Context, args ...string) *daemon {
	t.Helper()
	bin := policydBinary(t)
	cmd := exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0", "--log-format", "json"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemon{cmd: cmd, logs: &lockedBuffer{}, exited: make(chan struct{})}
	// Read stderr to EOF (process exit), watching for the "serving" record.
	addrc := make(chan string, 1)
	eof := make(chan struct{})
	go func() {
		defer close(eof)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			d.logs.WriteLine(sc.Bytes())
			var rec struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "serving" {
				addrc <- rec.Addr
			}
		}
	}()
	go func() {
		<-eof
		d.waitErr = cmd.Wait()
		close(d.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // no-op once it has exited
		<-d.exited
	})

	select {
	case d.addr = <-addrc:
	case <-d.exited:
		t.Fatalf("policyd exited before serving: %v\n%s", d.waitErr, d.logs.String())
	case <-ctx.Done():
		t.Fatalf("no serving record:\n%s", d.logs.String())
	}
	return d
}

// terminate sends d SIGTERM and fails the test unless it exits 0 within
// the given time (a graceful stop).
func (d *daemon) terminate(t *testing.T, within time.Duration) {
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.exited:
		if d.waitErr != nil {
			t.Fatalf("policyd after SIGTERM: %v\n%s", d.waitErr, d.logs.String())
		}
	case <-time.After(within):
		t.Fatalf("policyd still running %v after SIGTERM\n%s", within, d.logs.String())
	}
}

// dial returns a PolicyService client of d, closed when the test ends.
func (d *daemon) dial(t *testing.T) policydv1.PolicyServiceClient {
	t.Helper()
	return policydv1.NewPolicyServiceClient(d.conn(t))
}

// conn returns a client connection to d, closed when the test ends.
func (d *daemon) conn(t *testing.T) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(d.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func TestServeE2E(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	d := startDaemon(t, ctx)
	conn, err := grpc.NewClient(d.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
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

	d.terminate(t, 10*time.Second)
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
		{name: "unknown command", args: []string{"bogus"}, wantCode: 2, wantStderr: `policyd: unknown command "bogus"; 'policyd help' lists the commands`},
		{name: "misspelt command", args: []string{"clasify"}, wantCode: 2, wantStderr: `policyd: unknown command "clasify"; did you mean classify?`},
		{name: "no command", args: nil, wantCode: 2, wantStderr: "Usage:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			stdout := runCommand(t, bin, tt.stdin, tt.args, tt.wantCode, tt.wantStdout, tt.wantStderr)
			if tt.wantType != policydv1.FailureType_FAILURE_TYPE_UNSPECIFIED {
				var resp policydv1.ClassifyResponse
				if err := protojson.Unmarshal(stdout, &resp); err != nil {
					t.Fatalf("stdout is not a JSON ClassifyResponse: %v\n%s", err, stdout)
				}
				if got := resp.GetClassification().GetFailureType(); got != tt.wantType {
					t.Errorf("failure type = %v, want %v", got, tt.wantType)
				}
			}
		})
	}
}

// runCommand runs bin with args and stdin (empty: /dev/null), checks its
// exit code and that stdout and stderr contain wantStdout and wantStderr,
// and returns stdout.
func runCommand(t *testing.T, bin, stdin string, args []string, wantCode int, wantStdout, wantStderr string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil && cmd.ProcessState == nil {
		t.Fatal(err)
	}
	if got := cmd.ProcessState.ExitCode(); got != wantCode {
		t.Fatalf("exit code = %d, want %d\nstdout: %s\nstderr: %s", got, wantCode, &stdout, &stderr)
	}
	if !strings.Contains(stdout.String(), wantStdout) {
		t.Errorf("stdout %q does not contain %q", &stdout, wantStdout)
	}
	if !strings.Contains(stderr.String(), wantStderr) {
		t.Errorf("stderr %q does not contain %q", &stderr, wantStderr)
	}
	return stdout.Bytes()
}

// fastPolicy is a policy file adding profile "fast", whose SERVER_ERROR
// strategy waits initialDelay; "soon" makes line 5 bad.
func fastPolicy(initialDelay string) string {
	return `profiles:
  fast:
    extends: default
    strategies:
      SERVER_ERROR: {retry: true, max_attempts: 9, backoff: constant, initial_delay: ` + initialDelay + `}
`
}

// badFastField is how an error about fastPolicy("soon") names the place.
const badFastField = `:5: profiles.fast.strategies.SERVER_ERROR.initial_delay: "soon" is not a duration`

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// hasRecord reports whether d has logged a JSON record whose string value
// at each key of want contains want's value.
func (d *daemon) hasRecord(want map[string]string) bool {
	for line := range strings.Lines(d.logs.String()) {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		match := true
		for k, v := range want {
			if s, ok := rec[k].(string); !ok || !strings.Contains(s, v) {
				match = false
			}
		}
		if match {
			return true
		}
	}
	return false
}

// eventually polls cond every 50 ms until it holds, failing the test after 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitFor(t, 5*time.Second, what, cond)
}

// waitFor polls cond every 50 ms until it holds, failing the test after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", limit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The policy file: a new profile, reloaded on SIGHUP and on change; a bad
// new file keeps the policy in force.
func TestServePolicyReloadE2E(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	file := filepath.Join(dir, "policy.yaml")
	writeFile(t, file, fastPolicy("2s"))
	d := startDaemon(t, ctx, "--policy", file)
	client := d.dial(t)

	resp, err := client.GetProfile(ctx, &policydv1.GetProfileRequest{Name: "fast"})
	if err != nil || resp.GetProfile().GetSource() != file {
		t.Fatalf("GetProfile(fast) = %v, %v; want the profile from %s", resp.GetProfile(), err, file)
	}
	// fastDelay is NextDelay's delay for a 500 under profile fast, or -1.
	fastDelay := func() time.Duration {
		resp, err := client.NextDelay(ctx, &policydv1.NextDelayRequest{Profile: "fast", Attempt: 1, Failure: &policydv1.Failure{HttpStatus: 500}})
		if err != nil || resp.GetDecision().GetAction() != policydv1.Action_ACTION_RETRY {
			return -1
		}
		return resp.GetDecision().GetDelay().AsDuration()
	}
	if got := fastDelay(); got != 2*time.Second {
		t.Fatalf("fast delay = %v, want 2s\n%s", got, d.logs.String())
	}
	hup := func() {
		t.Helper()
		if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}

	writeFile(t, file, fastPolicy("3s"))
	hup()
	eventually(t, "SIGHUP reloads the 3s policy", func() bool {
		return fastDelay() == 3*time.Second && d.hasRecord(map[string]string{"msg": "policy reloaded", "trigger": "SIGHUP"})
	})

	writeFile(t, file, fastPolicy("soon"))
	hup()
	eventually(t, "SIGHUP logs the bad file's line and field", func() bool {
		return d.hasRecord(map[string]string{"msg": "policy reload failed", "trigger": "SIGHUP", "error": file + badFastField})
	})
	if got := fastDelay(); got != 3*time.Second {
		t.Fatalf("after a bad file: fast delay = %v, want the 3s still in force\n%s", got, d.logs.String())
	}

	// An editor's save: write a new file, rename it over the old one; no signal.
	tmp := filepath.Join(dir, ".policy.yaml.swp")
	writeFile(t, tmp, fastPolicy("4s"))
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the file watcher reloads the 4s policy", func() bool { return fastDelay() == 4*time.Second })
}

func TestServeBadPolicyE2E(t *testing.T) {
	t.Parallel()
	bin := policydBinary(t)
	file := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, file, fastPolicy("soon"))
	runCommand(t, bin, "", []string{"serve", "--listen", "127.0.0.1:0", "--policy", file}, 2, "", file+badFastField)
}

func TestCheckPolicyE2E(t *testing.T) {
	t.Parallel()
	bin := policydBinary(t)
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.yaml"), filepath.Join(dir, "bad.yaml")
	writeFile(t, good, fastPolicy("2s"))
	writeFile(t, bad, fastPolicy("soon"))
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{name: "good", args: []string{good}, wantStdout: good + ": ok, 5 profiles (agent_cli, default, fast, task_runner, web_fetch)\n"},
		{name: "bad", args: []string{bad}, wantCode: 1, wantStderr: bad + badFastField},
		{name: "missing file", args: []string{filepath.Join(dir, "nope.yaml")}, wantCode: 1, wantStderr: "nope.yaml"},
		{name: "no file", args: nil, wantCode: 2, wantStderr: "want one policy FILE"},
		{name: "two files", args: []string{good, bad}, wantCode: 2, wantStderr: "want one policy FILE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			runCommand(t, bin, "", append([]string{"check-policy"}, tt.args...), tt.wantCode, tt.wantStdout, tt.wantStderr)
		})
	}
}

func TestNextDelayCommandE2E(t *testing.T) {
	t.Parallel()
	bin := policydBinary(t)
	file := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, file, fastPolicy("2s"))
	rateLimit := func(extra ...string) []string {
		return append([]string{"next-delay", "--profile", "task_runner", "--error-code", "RATE_LIMIT", "--operation", "task"}, extra...)
	}
	tests := []struct {
		name       string
		args       []string
		stdin      string // empty: /dev/null
		wantCode   int
		wantAction policydv1.Action // checked when wantCode is 0
		wantDelay  string           // the delay as JSON shows it, for a retry
		wantStderr string
	}{
		{name: "flags", args: rateLimit("--attempt", "3"), wantAction: policydv1.Action_ACTION_RETRY, wantDelay: "120s"},
		{name: "attempt defaults to 1", args: rateLimit(), wantAction: policydv1.Action_ACTION_RETRY, wantDelay: "30s"},
		{name: "attempts exhausted", args: rateLimit("--attempt", "7"), wantAction: policydv1.Action_ACTION_STOP},
		{
			name:       "json on stdin",
			args:       []string{"next-delay"},
			stdin:      `{"profile":"task_runner","attempt":3,"failure":{"operation":"task","errorCode":"RATE_LIMIT"}}`,
			wantAction: policydv1.Action_ACTION_RETRY, wantDelay: "120s",
		},
		{
			name:       "flags override json",
			args:       []string{"next-delay", "--attempt", "4"},
			stdin:      `{"profile":"task_runner","attempt":3,"failure":{"operation":"task","errorCode":"RATE_LIMIT"}}`,
			wantAction: policydv1.Action_ACTION_RETRY, wantDelay: "240s",
		},
		{
			name:       "failure type",
			args:       []string{"next-delay", "--failure-type", "CONTEXT_TOO_LONG"},
			wantAction: policydv1.Action_ACTION_FALL_BACK,
		},
		{
			name:       "policy file",
			args:       []string{"next-delay", "--policy", file, "--profile", "fast", "--status", "500"},
			wantAction: policydv1.Action_ACTION_RETRY, wantDelay: "2s",
		},
		{name: "attempt 0", args: rateLimit("--attempt", "0"), wantCode: 2, wantStderr: "--attempt: attempt: must be at least 1"},
		{name: "unknown profile", args: []string{"next-delay", "--profile", "fast", "--status", "500"}, wantCode: 2, wantStderr: `--profile: profile: unknown profile "fast"`},
		{name: "bad failure type", args: []string{"next-delay", "--failure-type", "BOGUS"}, wantCode: 2, wantStderr: "--failure-type"},
		{name: "bad deadline", args: rateLimit("--deadline", "tomorrow"), wantCode: 2, wantStderr: "--deadline"},
		{name: "json without attempt", args: []string{"next-delay"}, stdin: `{"failureType":"FAILURE_TYPE_RATE_LIMIT"}`, wantCode: 2, wantStderr: "stdin: attempt"},
		{name: "no input", args: []string{"next-delay"}, wantCode: 2, wantStderr: "no failure given"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			stdout := runCommand(t, bin, tt.stdin, tt.args, tt.wantCode, "", tt.wantStderr)
			if tt.wantCode != 0 {
				return
			}
			var resp policydv1.NextDelayResponse
			if err := protojson.Unmarshal(stdout, &resp); err != nil {
				t.Fatalf("stdout is not a JSON NextDelayResponse: %v\n%s", err, stdout)
			}
			if got := resp.GetDecision().GetAction(); got != tt.wantAction {
				t.Errorf("action = %v, want %v\n%s", got, tt.wantAction, stdout)
			}
			if tt.wantDelay != "" && !strings.Contains(string(stdout), `"delay": "`+tt.wantDelay+`"`) {
				t.Errorf("stdout does not show delay %q:\n%s", tt.wantDelay, stdout)
			}
		})
	}
}
