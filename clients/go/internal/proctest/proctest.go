// Package proctest starts the real processes the client's tests talk to,
// on 127.0.0.1: a policyd (bin/policyd, or built from the repository) and
// the fake LLM provider (bin/policyd-fakeprovider). The client's own tests
// and the SDK tests (the sdktest module) share it.
package proctest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// RepoRoot is the policyd repository above the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; d != filepath.Dir(d); d = filepath.Dir(d) {
		b, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && bytes.HasPrefix(b, []byte("module github.com/policyd/policyd\n")) {
			return d, nil
		}
	}
	return "", fmt.Errorf("no policyd repository above %s", dir)
}

// Binary is the binary env names, else cmd (e.g. "./cmd/policyd") built
// from the repository into dir.
func Binary(env, cmd, dir string) (string, error) {
	if p := os.Getenv(env); p != "" {
		return p, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", fmt.Errorf("%w: set %s", err, env)
	}
	out := filepath.Join(dir, filepath.Base(cmd))
	build := exec.Command("go", "build", "-o", out, cmd)
	build.Dir = root
	if b, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", cmd, err, b)
	}
	return out, nil
}

// Daemon is a running policyd.
type Daemon struct {
	Addr string
	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	logs bytes.Buffer
}

// StartDaemon starts `bin serve --listen listen --log-format json args...`
// (listen host:port; port 0 picks a free one) with none of the caller's
// POLICYD_* and DATABASE_URL variables, and waits for its "serving"
// record.
func StartDaemon(bin, listen string, args ...string) (*Daemon, error) {
	cmd := exec.Command(bin, append([]string{"serve", "--listen", listen, "--log-format", "json"}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "POLICYD_") && !strings.HasPrefix(kv, "DATABASE_URL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	d := &Daemon{cmd: cmd, done: make(chan struct{})}
	serving := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			d.mu.Lock()
			d.logs.Write(sc.Bytes())
			d.logs.WriteByte('\n')
			d.mu.Unlock()
			var rec struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "serving" {
				serving <- rec.Addr
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		_ = cmd.Wait()
		close(d.done)
	}()
	select {
	case d.Addr = <-serving:
		return d, nil
	case <-d.done:
	case <-time.After(60 * time.Second):
		d.Stop()
	}
	return nil, fmt.Errorf("policyd did not start serving:\n%s", d.Logs())
}

// Stop ends the daemon with SIGTERM (SIGKILL after 15 s) and waits.
func (d *Daemon) Stop() {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(15 * time.Second):
		d.Kill()
	}
}

// Kill ends the daemon at once, as a crash would, and waits.
func (d *Daemon) Kill() {
	_ = d.cmd.Process.Kill()
	<-d.done
}

// Logs is what the daemon logged so far.
func (d *Daemon) Logs() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.logs.String()
}

// FakeProvider is a running policyd-fakeprovider.
type FakeProvider struct {
	// URL is its base, http://127.0.0.1:PORT.
	URL  string
	cmd  *exec.Cmd
	done chan struct{}
}

// StartFakeProvider starts bin with flags (-rpm, -tpm, -reply-tokens,
// -chunk-delay, ...) and reads its address from its first line.
func StartFakeProvider(bin string, flags ...string) (*FakeProvider, error) {
	cmd := exec.Command(bin, flags...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &FakeProvider{cmd: cmd, done: make(chan struct{})}
	first := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		first <- line
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
		close(p.done)
	}()
	select {
	case line := <-first:
		if u, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on "); ok {
			p.URL = u
			return p, nil
		}
		p.Stop()
		return nil, fmt.Errorf("policyd-fakeprovider's first line is %q, want \"listening on URL\"", line)
	case <-time.After(30 * time.Second):
		p.Stop()
		return nil, fmt.Errorf("policyd-fakeprovider did not start")
	}
}

// Stop ends the fake provider and waits.
func (p *FakeProvider) Stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Stats are the fake provider's counts (GET /fake/stats).
type Stats struct {
	Requests     int64 `json:"requests"`
	OK           int64 `json:"ok"`
	RateLimited  int64 `json:"rate_limited"`
	Failed       int64 `json:"failed"`
	Streams      int64 `json:"streams"`
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

// Stats asks the fake provider what came.
func (p *FakeProvider) Stats() (Stats, error) {
	var s Stats
	resp, err := http.Get(p.URL + "/fake/stats")
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

// Failure is an injected failure (POST /fake/fail): the next Count
// requests (1 when 0) get it.
type Failure struct {
	Status     int    `json:"status,omitempty"`
	Body       string `json:"body,omitempty"`
	Count      int    `json:"count,omitempty"`
	RetryAfter string `json:"retry_after,omitempty"`
	CutStream  bool   `json:"cut_stream,omitempty"`
}

// Fail queues f.
func (p *FakeProvider) Fail(f Failure) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	resp, err := http.Post(p.URL+"/fake/fail", "application/json", bytes.NewReader(b))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		msg, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("POST /fake/fail: %s: %s", resp.Status, msg)
	}
	return nil
}
