package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// process is a server the benchmark started: policyd or the echo baseline.
type process struct {
	name string
	cmd  *exec.Cmd
	addr string
}

// startProcess runs bin with args, and env added to this process's
// environment, and waits until it logs a JSON record
// {"msg":"serving","addr":...} on stderr.
func startProcess(name string, env []string, bin string, args ...string) (*process, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd}
	addrc := make(chan string, 1)
	var tail []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if len(tail) < 50 {
				tail = append(tail, line)
			}
			var rec struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "serving" && rec.Addr != "" {
				select {
				case addrc <- rec.Addr:
				default:
				}
			}
		}
	}()
	select {
	case p.addr = <-addrc:
		return p, nil
	case <-done:
		_ = cmd.Wait()
		return nil, fmt.Errorf("%s exited before serving:\n%s", name, strings.Join(tail, "\n"))
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("%s did not start serving within 60s:\n%s", name, strings.Join(tail, "\n"))
	}
}

// peakRSS returns the process's peak resident set size in bytes (VmHWM).
func (p *process) peakRSS() (int64, error) { return p.statusBytes("VmHWM") }

// rss returns the process's resident set size now, in bytes (VmRSS).
func (p *process) rss() (int64, error) { return p.statusBytes("VmRSS") }

// statusBytes reads a size in kB from the process's /proc status, in bytes.
func (p *process) statusBytes(field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, p.cmd.Process.Pid)
}

// stop sends SIGTERM and waits up to 15s before killing.
func (p *process) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}
