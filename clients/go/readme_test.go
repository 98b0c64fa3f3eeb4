package policyd_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// goBlocks returns README.md's ```go blocks, each with the file its
// "<!-- file: PATH -->" marker names (empty for a snippet) or, for a
// snippet of another module's (the SDKs'), the test file its
// "<!-- in: PATH -->" marker names.
func goBlocks(t *testing.T) (blocks []struct{ file, in, code string }) {
	t.Helper()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?s)(?:<!-- (file|in): (\\S+) -->\n)?```go\n(.*?)```\n")
	for _, m := range re.FindAllStringSubmatch(string(readme), -1) {
		b := struct{ file, in, code string }{code: m[3]}
		if m[1] == "file" {
			b.file = m[2]
		} else {
			b.in = m[2]
		}
		blocks = append(blocks, b)
	}
	if len(blocks) == 0 {
		t.Fatal("README.md has no go blocks")
	}
	return blocks
}

// Every Go block of the README is checked: a program is byte for byte the
// file its marker names (which TestREADMEExamplesRun builds and runs), a
// snippet sits verbatim in an Example function (which the compiler checks),
// and a snippet with an SDK sits verbatim in the sdktest module's test its
// marker names (which runs it).
func TestREADMEBlocksAreChecked(t *testing.T) {
	t.Parallel()
	examples, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range goBlocks(t) {
		if b.file != "" {
			file, err := os.ReadFile(b.file)
			if err != nil {
				t.Errorf("README names %s: %v", b.file, err)
			} else if string(file) != b.code {
				t.Errorf("README's copy of %s differs from the file; paste the file into the README", b.file)
			}
			continue
		}
		var indented strings.Builder
		for _, line := range strings.SplitAfter(b.code, "\n") {
			if strings.TrimSpace(line) != "" {
				indented.WriteString("\t")
			}
			indented.WriteString(line)
		}
		if b.in != "" {
			if test, err := os.ReadFile(b.in); err != nil || !strings.Contains(string(test), indented.String()) {
				t.Errorf("README snippet is not in %s (%v):\n%s", b.in, err, b.code)
			}
			continue
		}
		if !strings.Contains(string(examples), indented.String()) {
			t.Errorf("README snippet is in no Example function of example_test.go:\n%s", b.code)
		}
	}
}

var (
	exampleBuild sync.Once
	exampleDir   string
	exampleErr   error
)

// buildExamples builds the README's programs once.
func buildExamples(t *testing.T) string {
	t.Helper()
	exampleBuild.Do(func() {
		exampleDir = filepath.Join(tmpDir, "examples")
		cmd := exec.Command("go", "build", "-o", exampleDir+string(filepath.Separator), "./examples/...")
		if out, err := cmd.CombinedOutput(); err != nil {
			exampleErr = errors.New("go build ./examples/...: " + err.Error() + "\n" + string(out))
		}
	})
	if exampleErr != nil {
		t.Fatal(exampleErr)
	}
	return exampleDir
}

// runExample runs a README program with env added to ours.
func runExample(t *testing.T, name string, env []string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(buildExamples(t), name), args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "POLICYD_") && !strings.HasPrefix(kv, "OPENAI_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// The README's programs run as written against a real policyd and a flaky
// local server standing in for the API and the web page.
func TestREADMEExamplesRun(t *testing.T) {
	t.Parallel()
	addr := daemonAddr(t)

	t.Run("chat: a 502 is retried", func(t *testing.T) {
		t.Parallel()
		srv := newFlaky(t, step{status: 502, body: serverErrBody},
			step{status: 200, body: `{"choices":[{"message":{"role":"assistant","content":"hi!"}}]}`})
		stdout, stderr, err := runExample(t, "chat",
			[]string{"POLICYD_ADDR=" + addr, "OPENAI_BASE_URL=" + srv.URL + "/v1", "OPENAI_API_KEY=sk-test"})
		if err != nil {
			t.Fatalf("chat: %v\n%s", err, stderr)
		}
		if !strings.Contains(stdout, `"content":"hi!"`) || srv.hits.Load() != 2 {
			t.Errorf("chat printed %q after %d requests, want the answer after 2", stdout, srv.hits.Load())
		}
	})

	t.Run("chat: a 401 stops with the recovery action", func(t *testing.T) {
		t.Parallel()
		srv := newFlaky(t, step{status: 401, body: badKeyBody})
		_, stderr, err := runExample(t, "chat",
			[]string{"POLICYD_ADDR=" + addr, "OPENAI_BASE_URL=" + srv.URL + "/v1", "OPENAI_API_KEY=sk-wrong"})
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Fatalf("chat = %v, want exit status 1", err)
		}
		want := "HTTP 401 Unauthorized (policyd: stopped after 1 attempt: not retryable: " + authRecovery +
			" [AUTH_INVALID, rule auth.invalid])"
		if !strings.Contains(stderr, want) || srv.hits.Load() != 1 {
			t.Errorf("chat said %q after %d requests; want %q after 1", stderr, srv.hits.Load(), want)
		}
	})

	t.Run("fetch: a dropped connection is retried", func(t *testing.T) {
		t.Parallel()
		srv := newFlaky(t, step{drop: true}, step{status: 200, body: "<html>hello</html>"})
		stdout, stderr, err := runExample(t, "fetch", []string{"POLICYD_ADDR=" + addr}, srv.URL+"/page")
		if err != nil {
			t.Fatalf("fetch: %v\n%s", err, stderr)
		}
		if stdout != "fetched 18 bytes\n" || srv.hits.Load() != 2 {
			t.Errorf("fetch printed %q after %d requests, want \"fetched 18 bytes\" after 2", stdout, srv.hits.Load())
		}
	})

	t.Run("fetch: a token over TLS from the environment", func(t *testing.T) {
		t.Parallel()
		ca := newTestCA(t)
		srvCert, srvKey := ca.issue("localhost", true)
		d := authDaemon(t, "--auth-tokens", tokensFile(t), "--tls-cert", srvCert, "--tls-key", srvKey)
		srv := newFlaky(t, step{status: 503}, step{status: 200, body: "ok"})
		env := []string{"POLICYD_ADDR=" + d.addr, "POLICYD_TLS_CA=" + ca.CertFile}
		stdout, stderr, err := runExample(t, "fetch", append(env, "POLICYD_TOKEN="+testToken), srv.URL)
		if err != nil || stdout != "fetched 2 bytes\n" || stderr != "" {
			t.Errorf("fetch = %v, printed %q and logged %q; want the page and no warning", err, stdout, stderr)
		}
		srv = newFlaky(t, step{status: 503}, step{status: 200, body: "ok"})
		_, stderr, err = runExample(t, "fetch", env, srv.URL)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || !strings.Contains(stderr, "UNAUTHENTICATED") || !strings.Contains(stderr, "set POLICYD_TOKEN") {
			t.Errorf("fetch without a token = %v, logged %q; want exit status 1 naming POLICYD_TOKEN", err, stderr)
		}
		if strings.Contains(stderr, testToken) || strings.Contains(d.logText(), testToken) {
			t.Error("the token reached a log")
		}
	})

	t.Run("fetch: policyd down, the client fails open", func(t *testing.T) {
		t.Parallel()
		srv := newFlaky(t, step{status: 503}, step{status: 200, body: "ok"})
		stdout, stderr, err := runExample(t, "fetch", []string{"POLICYD_ADDR=" + closedAddr(t)}, srv.URL)
		if err != nil {
			t.Fatalf("fetch: %v\n%s", err, stderr)
		}
		if stdout != "fetched 2 bytes\n" || !strings.Contains(stderr, "daemon unreachable") {
			t.Errorf("fetch printed %q and logged %q; want the page and one fail-open warning", stdout, stderr)
		}
	})
}
