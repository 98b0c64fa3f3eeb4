package policyd_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	policyd "github.com/policyd/policyd/clients/go"
	policydv1 "github.com/policyd/policyd/clients/go/internal/gen/policyd/v1"
	"github.com/policyd/policyd/clients/go/internal/proctest"
)

// The tests run against real policyd processes: one without a journal, and
// one journaling into TEST_DATABASE_URL when it is set. POLICYD_BIN names a
// built binary; without it the daemon is built from the repository root.
// Daemons start on first use and stop when the tests end.

var (
	daemons   = map[bool]*daemon{} // by "with journal"
	daemonsMu sync.Mutex
	binOnce   sync.Once
	binPath   string
	binErr    error
	tmpDir    string
)

func TestMain(m *testing.M) {
	var err error
	tmpDir, err = os.MkdirTemp("", "policyd-go-client-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	daemonsMu.Lock()
	for _, d := range daemons {
		d.stop()
	}
	daemonsMu.Unlock()
	os.RemoveAll(tmpDir)
	os.Exit(code)
}

// policydBin returns POLICYD_BIN, or a binary built from the repository.
func policydBin(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() { binPath, binErr = proctest.Binary("POLICYD_BIN", "./cmd/policyd", tmpDir) })
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// daemon is a running policyd process.
type daemon struct {
	*proctest.Daemon
	addr   string
	policy string // the --policy file a test wrote, if any
}

func (d *daemon) stop() { d.Stop() }

// startDaemon starts `policyd serve` on listen (host:port; port 0 picks a
// free one) and waits for its "serving" record. databaseURL empty: the
// journal is off. extra are more serve flags, e.g. --auth-tokens FILE.
func startDaemon(listen, databaseURL string, extra ...string) (*daemon, error) {
	// Fleet memory off unless a test asks for it (a later --fleet wins):
	// these tests check the client, and one test's failures must not open a
	// breaker or spend a retry budget for the next.
	args := []string{"--fleet", "off"}
	if databaseURL != "" {
		args = append(args, "--database-url", databaseURL)
	}
	d, err := proctest.StartDaemon(binPath, listen, append(args, extra...)...)
	if err != nil {
		return nil, err
	}
	return &daemon{Daemon: d, addr: d.Addr}, nil
}

// daemonAddr returns the address of the shared daemon without a journal.
func daemonAddr(t testing.TB) string {
	t.Helper()
	return sharedDaemon(t, false).addr
}

// journalDaemonAddr returns the address of the shared daemon journaling
// into TEST_DATABASE_URL. Without TEST_DATABASE_URL the test is skipped,
// unless POLICYD_REQUIRE_JOURNAL=1 (scripts/test.sh sets it), which fails it.
func journalDaemonAddr(t testing.TB) string {
	t.Helper()
	if os.Getenv("TEST_DATABASE_URL") == "" {
		if os.Getenv("POLICYD_REQUIRE_JOURNAL") == "1" {
			t.Fatal("TEST_DATABASE_URL is not set, and POLICYD_REQUIRE_JOURNAL=1")
		}
		t.Skip("TEST_DATABASE_URL is not set: journal tests skipped (scripts/test.sh starts a database)")
	}
	return sharedDaemon(t, true).addr
}

func sharedDaemon(t testing.TB, journal bool) *daemon {
	t.Helper()
	policydBin(t)
	daemonsMu.Lock()
	defer daemonsMu.Unlock()
	if d, ok := daemons[journal]; ok {
		return d
	}
	url := ""
	if journal {
		url = os.Getenv("TEST_DATABASE_URL")
	}
	d, err := startDaemon("127.0.0.1:0", url)
	if err != nil {
		t.Fatal(err)
	}
	daemons[journal] = d
	return d
}

// rawClients returns generated stubs on addr, to read the journal and to
// ask policyd directly.
func rawClients(t testing.TB, addr string) (policydv1.PolicyServiceClient, policydv1.JournalServiceClient) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return policydv1.NewPolicyServiceClient(conn), policydv1.NewJournalServiceClient(conn)
}

// newClient dials addr with opts and closes the client at the end of the test.
func newClient(t testing.TB, addr string, opts ...policyd.Option) *policyd.Client {
	t.Helper()
	c, err := policyd.Dial(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rpcCounter counts the unary RPCs a client makes, by method.
type rpcCounter struct {
	mu    sync.Mutex
	calls []string
}

func (c *rpcCounter) option() policyd.Option {
	return policyd.WithDialOptions(grpc.WithUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			c.mu.Lock()
			c.calls = append(c.calls, method[strings.LastIndexByte(method, '/')+1:])
			c.mu.Unlock()
			return invoker(ctx, method, req, reply, cc, opts...)
		}))
}

func (c *rpcCounter) get() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.calls...)
}

// step is one scripted answer of a flaky server.
type step struct {
	status  int
	headers map[string]string
	body    string
	drop    bool          // close the connection without answering
	delay   time.Duration // wait this long before answering (or until the client gives up)
}

// flaky is a real HTTP server on 127.0.0.1 that answers each request with
// the next step of its script, repeating the last step once the script
// runs out.
type flaky struct {
	*httptest.Server
	steps []step
	hits  atomic.Int32
}

func newFlaky(t testing.TB, steps ...step) *flaky {
	t.Helper()
	f := &flaky{steps: steps}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

func (f *flaky) serve(w http.ResponseWriter, r *http.Request) {
	n := int(f.hits.Add(1))
	s := f.steps[min(n, len(f.steps))-1]
	_, _ = io.Copy(io.Discard, r.Body)
	if s.delay > 0 {
		select {
		case <-time.After(s.delay):
		case <-r.Context().Done():
			return
		}
	}
	if s.drop {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	for k, v := range s.headers {
		w.Header().Set(k, v)
	}
	if s.status == 0 {
		s.status = http.StatusOK
	}
	w.WriteHeader(s.status)
	_, _ = io.WriteString(w, s.body)
}

// get is an operation that GETs url with c.
func get(c *http.Client, url string) policyd.AttemptFunc {
	return func(ctx context.Context, attempt int) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		if err := policyd.CheckResponse(resp); err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
}

// chat is an operation that POSTs a chat request to url.
func chat(url string) policyd.AttemptFunc {
	return func(ctx context.Context, attempt int) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions",
			strings.NewReader(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		if err := policyd.CheckResponse(resp); err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
}

// fakeClock fires every timer at once and moves its time forward by the
// timer's duration, recording each wait.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Now()} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) policyd.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps = append(c.sleeps, d)
	c.now = c.now.Add(d)
	ch := make(chan time.Time, 1)
	ch <- c.now
	return fakeTimer(ch)
}

func (c *fakeClock) waits() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

type fakeTimer chan time.Time

func (t fakeTimer) C() <-chan time.Time { return t }
func (t fakeTimer) Stop() bool          { return false }

// fixedRand always draws r.
type fixedRand float64

func (r fixedRand) Float64() float64 { return float64(r) }

// decisions records what a client decided.
type decisions struct {
	mu  sync.Mutex
	all []policyd.Decision
}

func (d *decisions) option() policyd.Option {
	return policyd.WithOnDecision(func(_ int, _ error, dec policyd.Decision) {
		d.mu.Lock()
		d.all = append(d.all, dec)
		d.mu.Unlock()
	})
}

func (d *decisions) get() []policyd.Decision {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]policyd.Decision(nil), d.all...)
}

// logBuffer is a concurrency-safe slog destination.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
