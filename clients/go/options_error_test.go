package policyd_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	policyd "github.com/policyd/policyd/clients/go"
)

// A mistake in the caller's configuration is an error, as a refused token
// is: the client neither retries on its own policy nor journals nothing in
// silence.
func TestDoStopsOnInvalidOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		addr    func(testing.TB) string
		opts    []policyd.Option
		call    policyd.Call
		method  string
		mention string
	}{
		{name: "unknown profile", addr: daemonAddr, opts: []policyd.Option{policyd.WithProfile("web_fech")},
			method: "NextDelay", mention: `unknown profile "web_fech"; known:`},
		{name: "unknown profile, journaled", addr: journalDaemonAddr,
			opts:   []policyd.Option{policyd.WithProfile("web_fech"), policyd.WithJournal(true)},
			method: "BeginContext", mention: `"web_fech"`},
		{name: "too many labels", addr: journalDaemonAddr, opts: []policyd.Option{policyd.WithJournal(true)},
			call: policyd.Call{Labels: manyLabels(100)}, method: "BeginContext", mention: "labels"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newFlaky(t, step{status: 503, body: overloadedBody}, step{status: 200})
			c := newClient(t, tc.addr(t), append(tc.opts, policyd.WithClock(newFakeClock()))...)
			call := tc.call
			call.Provider, call.Model, call.Operation = openai.Provider, openai.Model, openai.Operation
			err := c.Do(context.Background(), call, chat(srv.URL))
			var oerr *policyd.OptionsError
			if !errors.Is(err, policyd.ErrInvalidOptions) || !errors.As(err, &oerr) ||
				status.Code(oerr.Err) != codes.InvalidArgument || oerr.Method != tc.method {
				t.Fatalf("Do = %v, want an *OptionsError of %s", err, tc.method)
			}
			if !strings.Contains(err.Error(), tc.mention) || !strings.Contains(err.Error(), "HTTP 503") {
				t.Errorf("message = %q, want the attempt's error and the daemon's message (%s)", err, tc.mention)
			}
			if got := srv.hits.Load(); got != 1 {
				t.Errorf("server saw %d requests, want 1: no retry on the built-in policy", got)
			}
		})
	}
}

func TestClassifyInvalidOptions(t *testing.T) {
	t.Parallel()
	c := newClient(t, daemonAddr(t))
	_, err := c.Classify(context.Background(), &policyd.Failure{HTTPStatus: 503}, "Web Fetch")
	if !errors.Is(err, policyd.ErrInvalidOptions) || !strings.Contains(err.Error(), "profile") {
		t.Fatalf("Classify = %v, want ErrInvalidOptions naming the profile", err)
	}
}

func manyLabels(n int) map[string]string {
	m := make(map[string]string, n)
	for i := range n {
		m[strings.Repeat("k", 1+i%5)+string(rune('a'+i%26))+string(rune('a'+i/26))] = "v"
	}
	return m
}

// An address in the shared grammar with a scheme reaches the daemon as
// host:port does (docs/clients.md, "The daemon address").
func TestDialHTTPURL(t *testing.T) {
	t.Parallel()
	srv := newFlaky(t, step{status: 503, body: overloadedBody}, step{status: 200})
	var decided decisions
	c := newClient(t, "http://"+daemonAddr(t)+"/", policyd.WithClock(newFakeClock()), decided.option())
	if err := c.Do(context.Background(), openai, chat(srv.URL)); err != nil {
		t.Fatalf("Do: %v", err)
	}
	if ds := decided.get(); len(ds) != 1 || ds[0].FailOpen {
		t.Errorf("decisions = %+v, want one of policyd's", ds)
	}
}
