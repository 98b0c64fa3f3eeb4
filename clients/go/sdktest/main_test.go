package sdktest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"

	policyd "github.com/policyd/policyd/clients/go"
	"github.com/policyd/policyd/clients/go/internal/proctest"
)

// The tests start real processes on 127.0.0.1: two policyd (fleet memory
// off, and on for the gate's test), POLICYD_BIN or built from the
// repository, and a fake provider per test, FAKEPROVIDER_BIN or built.

// testPolicy is the default profile with short delays, so that the
// retries the tests wait for take milliseconds; a 429's retry-after still
// decides its wait. The breaker opens on 3 failures from 1 client.
const testPolicy = `
profiles:
  sdktest:
    extends: default
    strategies:
      OVERLOADED: {retry: true, max_attempts: 4, backoff: exponential, initial_delay: 20ms, max_delay: 100ms, multiplier: 2,
                   jitter: full, honor_retry_after: true, retry_after_ceiling: 10s, fallback: none}
      RATE_LIMIT: {retry: true, max_attempts: 4, backoff: exponential, initial_delay: 20ms, max_delay: 100ms, multiplier: 2,
                   jitter: full, honor_retry_after: true, retry_after_mode: override, retry_after_ceiling: 10s, fallback: none}
fleet:
  breaker: {min_volume: 3, min_clients: 1}
`

var (
	tmpDir    string
	binsOnce  sync.Once
	policydB  string
	fakeB     string
	binsErr   error
	daemonsMu sync.Mutex
	daemons   = map[bool]*proctest.Daemon{}
)

func TestMain(m *testing.M) {
	var err error
	if tmpDir, err = os.MkdirTemp("", "policyd-sdktest-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	for _, d := range daemons {
		d.Stop()
	}
	os.RemoveAll(tmpDir)
	os.Exit(code)
}

func binaries(t *testing.T) {
	t.Helper()
	binsOnce.Do(func() {
		if policydB, binsErr = proctest.Binary("POLICYD_BIN", "./cmd/policyd", tmpDir); binsErr != nil {
			return
		}
		fakeB, binsErr = proctest.Binary("FAKEPROVIDER_BIN", "./cmd/policyd-fakeprovider", tmpDir)
	})
	if binsErr != nil {
		t.Fatal(binsErr)
	}
}

// daemonAddr is the address of the shared policyd with fleet memory on or
// off, and testPolicy.
func daemonAddr(t *testing.T, fleet bool) string {
	t.Helper()
	binaries(t)
	daemonsMu.Lock()
	defer daemonsMu.Unlock()
	if d, ok := daemons[fleet]; ok {
		return d.Addr
	}
	file := filepath.Join(tmpDir, "policy.yaml")
	if err := os.WriteFile(file, []byte(testPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	mode := map[bool]string{false: "off", true: "on"}[fleet]
	d, err := proctest.StartDaemon(policydB, "127.0.0.1:0", "--policy", file, "--fleet", mode)
	if err != nil {
		t.Fatal(err)
	}
	daemons[fleet] = d
	return d.Addr
}

// fakeProvider starts a fake provider for the test.
func fakeProvider(t *testing.T, flags ...string) *proctest.FakeProvider {
	t.Helper()
	binaries(t)
	p, err := proctest.StartFakeProvider(fakeB, flags...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

func fail(t *testing.T, p *proctest.FakeProvider, f proctest.Failure) {
	t.Helper()
	if err := p.Fail(f); err != nil {
		t.Fatal(err)
	}
}

func stats(t *testing.T, p *proctest.FakeProvider) proctest.Stats {
	t.Helper()
	s, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// rpcs counts the unary RPCs a client makes to policyd, by method.
type rpcs struct {
	mu    sync.Mutex
	calls []string
}

func (r *rpcs) option() policyd.Option {
	return policyd.WithDialOptions(grpc.WithUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			r.mu.Lock()
			r.calls = append(r.calls, method[strings.LastIndexByte(method, '/')+1:])
			r.mu.Unlock()
			return invoker(ctx, method, req, reply, cc, opts...)
		}))
}

// count is how many calls of method were made.
func (r *rpcs) count(method string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.calls {
		if m == method {
			n++
		}
	}
	return n
}

// client is a policyd client of the shared daemon (fleet on or off) with
// the test profile, closed at the end of the test.
func client(t *testing.T, fleet bool, opts ...policyd.Option) *policyd.Client {
	t.Helper()
	c, err := policyd.Dial(daemonAddr(t, fleet), append([]policyd.Option{policyd.WithProfile("sdktest")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
