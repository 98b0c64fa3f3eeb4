package policyd_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	policyd "github.com/policyd/policyd/clients/go"
	policydv1 "github.com/policyd/policyd/clients/go/internal/gen/policyd/v1"
	"github.com/policyd/policyd/clients/go/internal/proctest"
)

// The transport (docs/clients.md, "The transport") against a real policyd
// and the real fake provider (bin/policyd-fakeprovider, FAKEPROVIDER_BIN;
// built from the repository when unset), with net/http as the SDK; the
// sdktest module drives the real openai-go and anthropic-sdk-go.

var (
	fakeOnce sync.Once
	fakeBin  string
	fakeErr  error
)

// fakeProvider starts a fake provider with flags for the test.
func fakeProvider(t *testing.T, flags ...string) *proctest.FakeProvider {
	t.Helper()
	fakeOnce.Do(func() { fakeBin, fakeErr = proctest.Binary("FAKEPROVIDER_BIN", "./cmd/policyd-fakeprovider", tmpDir) })
	if fakeErr != nil {
		t.Fatal(fakeErr)
	}
	p, err := proctest.StartFakeProvider(fakeBin, flags...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

const chatBody = `{"model":"gpt-4o","messages":[{"role":"user","content":"Say hi"}]}`

// chatRequest is an OpenAI chat request to the fake provider at base.
func chatRequest(t *testing.T, ctx context.Context, base, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer k1")
	req.Header.Set("Content-Type", "application/json")
	return req
}

// send sends req with hc and reads the whole response.
func send(t *testing.T, hc *http.Client, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	return resp, string(b)
}

// A success passes through untouched (status, headers, body, byte for
// byte), streaming included, with no RPC to policyd.
func TestTransportSuccessPassesThroughWithoutRPC(t *testing.T) {
	t.Parallel()
	const answer = `{"id":"chatcmpl-1","choices":[{"message":{"role":"assistant","content":"hi!"}}]}` + "\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Request-Id", "req-1")
		w.Header().Set("X-Ratelimit-Remaining-Requests", "59")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, answer)
	}))
	t.Cleanup(srv.Close)
	p := fakeProvider(t)
	var rpcs rpcCounter
	var decided decisions
	c := newClient(t, daemonAddr(t), rpcs.option(), decided.option())
	hc := c.HTTPClient(policyd.TransportOptions{})

	resp, body := send(t, hc, chatRequest(t, context.Background(), srv.URL, chatBody))
	if resp.StatusCode != http.StatusCreated || body != answer || resp.Header.Get("X-Request-Id") != "req-1" ||
		resp.Header.Get("X-Ratelimit-Remaining-Requests") != "59" {
		t.Errorf("got %d %v %q, want the server's 201, headers and body untouched", resp.StatusCode, resp.Header, body)
	}
	for range 3 {
		if resp, body := send(t, hc, chatRequest(t, context.Background(), p.URL, chatBody)); resp.StatusCode != 200 || !strings.Contains(body, `"content":"ok! `) {
			t.Fatalf("fake provider: %d %q", resp.StatusCode, body)
		}
	}
	resp, body = send(t, hc, chatRequest(t, context.Background(), p.URL, `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if resp.Header.Get("Content-Type") != "text/event-stream" || !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Errorf("stream: %v %q, want the whole event stream", resp.Header, body)
	}
	if s := p.MustStats(t); s.Requests != 4 || s.OK != 4 || s.Streams != 1 {
		t.Errorf("fake provider saw %+v, want 4 requests, 4 ok, 1 stream", s)
	}
	if len(rpcs.get()) != 0 || len(decided.get()) != 0 {
		t.Errorf("RPCs %v, decisions %v: the success path asks policyd nothing", rpcs.get(), decided.get())
	}
}

// An injected 503 (twice) is retried by policyd with the same body, and the
// caller sees the success; a 429's retry-after is waited for.
func TestTransportRetries(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		path      string
		header    [2]string
		body      string
		fail      proctest.Failure
		wantWaits int
		minWait   time.Duration
	}{
		{name: "openai 503", path: "/v1/chat/completions", header: [2]string{"Authorization", "Bearer k1"}, body: chatBody,
			fail: proctest.Failure{Status: 503, Count: 2}, wantWaits: 2},
		{name: "anthropic 429 with retry-after", path: "/v1/messages", header: [2]string{"x-api-key", "k1"},
			body:      `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`,
			fail:      proctest.Failure{Status: 429, RetryAfter: "3", Body: `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`},
			wantWaits: 1, minWait: 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := fakeProvider(t)
			p.MustFail(t, tt.fail)
			clock := newFakeClock()
			var decided decisions
			c := newClient(t, daemonAddr(t), policyd.WithClock(clock), decided.option())
			req, _ := http.NewRequest(http.MethodPost, p.URL+tt.path, strings.NewReader(tt.body))
			req.Header.Set(tt.header[0], tt.header[1])
			resp, body := send(t, c.HTTPClient(policyd.TransportOptions{}), req)
			if resp.StatusCode != 200 || !strings.Contains(body, "ok! ") {
				t.Fatalf("got %d %q, want the retry's success", resp.StatusCode, body)
			}
			s := p.MustStats(t)
			if s.Requests != int64(tt.wantWaits+1) || s.OK != 1 || s.Failed != int64(tt.wantWaits) {
				t.Errorf("fake provider saw %+v, want %d failures then 1 success (the body resent whole)", s, tt.wantWaits)
			}
			ds := decided.get()
			if len(ds) != tt.wantWaits || ds[0].Action != policyd.ActionRetry || ds[0].Delay < tt.minWait {
				t.Errorf("decisions %+v, want %d retries, the first after at least %v", ds, tt.wantWaits, tt.minWait)
			}
			if waits := clock.waits(); len(waits) == 0 || waits[0] < tt.minWait {
				t.Errorf("waited %v, want at least %v first", waits, tt.minWait)
			}
		})
	}
}

// A failure policyd stops on is returned to the SDK as the response it
// was, body and all, at once: the SDK raises its own error for it.
func TestTransportReturnsTheStoppedResponse(t *testing.T) {
	t.Parallel()
	p := fakeProvider(t)
	var decided decisions
	c := newClient(t, daemonAddr(t), decided.option())
	hc := c.HTTPClient(policyd.TransportOptions{})

	const badKey = `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`
	p.MustFail(t, proctest.Failure{Status: 401, Body: badKey})
	resp, body := send(t, hc, chatRequest(t, context.Background(), p.URL, chatBody))
	if resp.StatusCode != 401 || body != badKey || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("bad key: %d %v %q, want the provider's 401 unchanged", resp.StatusCode, resp.Header, body)
	}
	if s := p.MustStats(t); s.Requests != 1 {
		t.Errorf("fake provider saw %d requests, want 1: no retry", s.Requests)
	}
	resp, body = send(t, hc, chatRequest(t, context.Background(), p.URL, `{"model":`))
	if resp.StatusCode != 400 || !strings.Contains(body, "invalid_request_error") {
		t.Errorf("bad JSON: %d %q, want the provider's 400 unchanged", resp.StatusCode, body)
	}
	ds := decided.get()
	if len(ds) != 2 || ds[0].Action != policyd.ActionStop || ds[0].FailureType != policyd.FailureTypeAuthInvalid ||
		ds[1].FailureType != policyd.FailureTypeInvalidRequest {
		t.Errorf("decisions %+v, want STOP on AUTH_INVALID and INVALID_REQUEST", ds)
	}
}

// A stream passes through as it comes: its first event arrives long before
// its last.
func TestTransportStreamsAsItComes(t *testing.T) {
	t.Parallel()
	p := fakeProvider(t, "-chunk-delay", "50ms", "-reply-tokens", "10")
	c := newClient(t, daemonAddr(t))
	start := time.Now()
	resp, err := c.HTTPClient(policyd.TransportOptions{}).Do(chatRequest(t, context.Background(), p.URL,
		`{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var first time.Duration
	events := 0
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") {
			if events == 0 {
				first = time.Since(start)
			}
			events++
		}
	}
	total := time.Since(start)
	if sc.Err() != nil || events != 12 || total < 450*time.Millisecond || first > total/2 {
		t.Errorf("%d events (%v), the first after %v of %v; want 12, the first well before the end", events, sc.Err(), first, total)
	}
}

// A stream cut after its first byte is not retried: the caller sees the
// error, the provider one request, and the gate counts a failed attempt
// (here with policyd away: the gate's counts stay in the client).
func TestTransportCutStreamIsNotRetried(t *testing.T) {
	t.Parallel()
	streamReq := `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	for _, away := range []bool{false, true} {
		t.Run(fmt.Sprintf("policyd away %v", away), func(t *testing.T) {
			t.Parallel()
			p := fakeProvider(t)
			p.MustFail(t, proctest.Failure{CutStream: true})
			addr := daemonAddr(t)
			if away {
				addr = closedAddr(t)
			}
			var decided decisions
			c := newClient(t, addr, decided.option(), policyd.WithLogger(discardLogger()))
			resp, err := c.HTTPClient(policyd.TransportOptions{KeyID: "k1"}).Do(chatRequest(t, context.Background(), p.URL, streamReq))
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil || !strings.Contains(string(b), "ok! ") {
				t.Fatalf("read %q, %v; want the first chunk, then an error", b, err)
			}
			if s := p.MustStats(t); s.Requests != 1 {
				t.Errorf("fake provider saw %d requests, want 1", s.Requests)
			}
			if len(decided.get()) != 0 {
				t.Errorf("decisions %v: a cut stream is not decided", decided.get())
			}
			if !away {
				return
			}
			u, ok := policyd.GateUsage(c, policyd.Call{Provider: "openai", Model: "gpt-4o", KeyID: "k1"})
			if !ok || u.Admitted != 1 || u.Succeeded != 1 || u.Failed != 1 || u.InFlight != 0 {
				t.Errorf("gate counts %+v, want 1 admitted, its headers a success, its cut a failure, nothing in flight", u)
			}
		})
	}
}

// The gate's stop is the client's own error, as Do returns it, and
// nothing is sent.
func TestTransportGateStopSendsNothing(t *testing.T) {
	t.Parallel()
	d := gateDaemon(t, breakerPolicy)
	p := fakeProvider(t)
	c := newClient(t, d.addr, policyd.WithParkLimit(0))
	subscribe(t, c, gpt4o)
	openBreaker(t, d.addr, c)

	_, err := c.HTTPClient(policyd.TransportOptions{KeyID: "k1"}).Do(chatRequest(t, context.Background(), p.URL, chatBody))
	var pe *policyd.Error
	if !errors.Is(err, policyd.ErrNotAdmitted) || !errors.As(err, &pe) || pe.Decision.StopReason != policyd.StopCircuitOpen {
		t.Fatalf("Do = %v, want the gate's *policyd.Error (CIRCUIT_OPEN)", err)
	}
	if !strings.Contains(err.Error(), "openai/gpt-4o@k1") {
		t.Errorf("error %q does not name the target", err)
	}
	if s := p.MustStats(t); s.Requests != 0 {
		t.Errorf("fake provider saw %d requests, want none", s.Requests)
	}
	// Another model is not gated by gpt-4o's breaker.
	resp, _ := send(t, c.HTTPClient(policyd.TransportOptions{KeyID: "k1"}), chatRequest(t, context.Background(), p.URL, `{"model":"gpt-4o-mini"}`))
	if resp.StatusCode != 200 {
		t.Errorf("gpt-4o-mini: %d, want 200", resp.StatusCode)
	}
}

// requestLog is a server that records each request's headers and body and
// answers with the next status of its script (the last one repeating).
type requestLog struct {
	*httptest.Server
	mu       sync.Mutex
	headers  []http.Header
	bodies   []string
	statuses []int
}

func newRequestLog(t *testing.T, statuses ...int) *requestLog {
	l := &requestLog{statuses: statuses}
	l.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		l.mu.Lock()
		l.headers = append(l.headers, r.Header.Clone())
		l.bodies = append(l.bodies, string(b))
		status := l.statuses[min(len(l.bodies), len(l.statuses))-1]
		l.mu.Unlock()
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"n":%d}`, len(b))
	}))
	t.Cleanup(l.Close)
	return l
}

func (l *requestLog) get() ([]http.Header, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.headers, l.bodies
}

// A request's input tokens: the caller's exact count in
// X-Policyd-Input-Tokens (stripped before it is sent), else the body's
// bytes / 4, rounded up, counted for the gate's report on first attempts
// and retries; a count that is not a number is an error, and nothing is
// sent. policyd is away here, so that the counts stay in the client.
func TestTransportInputTokens(t *testing.T) {
	t.Parallel()
	srv := newRequestLog(t, 503, 200)
	c := newClient(t, closedAddr(t), policyd.WithClock(newFakeClock()), policyd.WithRand(fixedRand(0)), policyd.WithLogger(discardLogger()))
	hc := c.HTTPClient(policyd.TransportOptions{Provider: "openai", KeyID: "tokens"})
	call := policyd.Call{Provider: "openai", Model: "gpt-4o", KeyID: "tokens"}

	req := chatRequest(t, context.Background(), srv.URL, chatBody) // 65 bytes: 17 tokens
	if resp, _ := send(t, hc, req); resp.StatusCode != 200 {
		t.Fatalf("status %d, want the retry's 200", resp.StatusCode)
	}
	if u, _ := policyd.GateUsage(c, call); u.FirstInputTokens != 17 || u.RetryInputTokens != 17 || u.Retries != 1 {
		t.Errorf("counts %+v, want 17 tokens for the first attempt and 17 for its retry", u)
	}
	req = chatRequest(t, context.Background(), srv.URL, chatBody)
	req.Header.Set(policyd.InputTokensHeader, "1200")
	send(t, hc, req)
	if u, _ := policyd.GateUsage(c, call); u.FirstInputTokens != 17+1200 {
		t.Errorf("first-attempt tokens %d, want 17 + the caller's 1200", u.FirstInputTokens)
	}
	headers, bodies := srv.get()
	for i, h := range headers {
		if h.Get(policyd.InputTokensHeader) != "" || bodies[i] != chatBody {
			t.Errorf("request %d sent %v %q: want the header stripped and the body whole", i, h, bodies[i])
		}
	}

	req = chatRequest(t, context.Background(), srv.URL, chatBody)
	req.Header.Set(policyd.InputTokensHeader, "many")
	if _, err := hc.Do(req); err == nil || !strings.Contains(err.Error(), policyd.InputTokensHeader) {
		t.Errorf("a count that is no number: %v, want an error naming the header", err)
	}
	if _, bodies := srv.get(); len(bodies) != 3 {
		t.Errorf("the server saw %d requests, want 3: none for the bad count", len(bodies))
	}
}

// Deadlines and cancellation as Do: a retry-after past the request's
// deadline returns the 429 at once; a cancel during the wait ends it with
// the context's error.
func TestTransportDeadlineAndCancel(t *testing.T) {
	t.Parallel()
	p := fakeProvider(t)
	c := newClient(t, daemonAddr(t))
	hc := c.HTTPClient(policyd.TransportOptions{})

	p.MustFail(t, proctest.Failure{Status: 429, RetryAfter: "30"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	resp, _ := send(t, hc, chatRequest(t, ctx, p.URL, chatBody))
	if resp.StatusCode != 429 || time.Since(start) > 3*time.Second {
		t.Errorf("got %d after %v, want the 429 at once", resp.StatusCode, time.Since(start))
	}

	p.MustFail(t, proctest.Failure{Status: 503, RetryAfter: "30"})
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	start = time.Now()
	_, err := hc.Do(chatRequest(t, ctx, p.URL, chatBody))
	var pe *policyd.Error
	if !errors.Is(err, context.Canceled) || !errors.As(err, &pe) || pe.Attempts != 1 || time.Since(start) > 5*time.Second {
		t.Errorf("cancelled: %v after %v, want the *policyd.Error of a cancelled wait", err, time.Since(start))
	}
	if s := p.MustStats(t); s.Requests != 2 {
		t.Errorf("fake provider saw %d requests, want 2", s.Requests)
	}
}

// With policyd away the transport decides with the fail-open policy, as
// Do: a 503 is retried; a connection refused three times is the client's
// error (one *url.Error around it, as http.Client makes).
func TestTransportFailsOpen(t *testing.T) {
	t.Parallel()
	srv := newRequestLog(t, 503, 200)
	c := newClient(t, closedAddr(t), policyd.WithClock(newFakeClock()), policyd.WithLogger(discardLogger()))
	hc := c.HTTPClient(policyd.TransportOptions{})
	if resp, _ := send(t, hc, chatRequest(t, context.Background(), srv.URL, chatBody)); resp.StatusCode != 200 {
		t.Errorf("status %d, want the retry's 200", resp.StatusCode)
	}

	_, err := hc.Do(chatRequest(t, context.Background(), "http://"+closedAddr(t), chatBody))
	var pe *policyd.Error
	if !errors.As(err, &pe) || pe.Attempts != 3 || !pe.Decision.FailOpen || strings.Count(err.Error(), "Post ") != 1 ||
		!strings.Contains(err.Error(), "connection refused") {
		t.Errorf("refused: %v, want the fail-open policy's 3 attempts, the error once", err)
	}
}

// Every attempt sends the whole body: one with GetBody is read once for
// its model and size, and each attempt sends a copy from GetBody; one
// without it is kept, and sent again from what was read.
func TestTransportReplaysBodies(t *testing.T) {
	t.Parallel()
	c := newClient(t, closedAddr(t), policyd.WithClock(newFakeClock()), policyd.WithRand(fixedRand(0)), policyd.WithLogger(discardLogger()))
	hc := c.HTTPClient(policyd.TransportOptions{Provider: "openai"})
	for _, withGetBody := range []bool{true, false} {
		srv := newRequestLog(t, 503, 200)
		req := chatRequest(t, context.Background(), srv.URL, chatBody)
		copies := 0
		if withGetBody {
			req.GetBody = func() (io.ReadCloser, error) {
				copies++
				return io.NopCloser(strings.NewReader(chatBody)), nil
			}
		} else {
			req.Body, req.GetBody = io.NopCloser(struct{ io.Reader }{strings.NewReader(chatBody)}), nil
		}
		if resp, _ := send(t, hc, req); resp.StatusCode != 200 {
			t.Fatalf("GetBody %v: status %d, want the retry's 200", withGetBody, resp.StatusCode)
		}
		_, bodies := srv.get()
		if len(bodies) != 2 || bodies[0] != chatBody || bodies[1] != chatBody {
			t.Errorf("GetBody %v: sent %q, want the whole body twice", withGetBody, bodies)
		}
		if want := map[bool]int{true: 2, false: 0}[withGetBody]; copies != want {
			t.Errorf("GetBody %v: %d copies from GetBody, want %d (one an attempt)", withGetBody, copies, want)
		}
	}
}

// A body the transport cannot send again (over 8 MiB, without GetBody) is
// irreversible: its failure is returned, not retried.
func TestTransportUnreplayableBodyIsNotRetried(t *testing.T) {
	t.Parallel()
	srv := newRequestLog(t, 503, 200)
	var decided decisions
	c := newClient(t, daemonAddr(t), policyd.WithClock(newFakeClock()), decided.option())
	head, pad, tail := `{"model":"gpt-4o","pad":"`, strings.Repeat("x", 9<<20), `"}`
	big := io.MultiReader(strings.NewReader(head), strings.NewReader(pad), strings.NewReader(tail))
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", big)
	resp, _ := send(t, c.HTTPClient(policyd.TransportOptions{}), req)
	_, bodies := srv.get()
	if resp.StatusCode != 503 || len(bodies) != 1 || bodies[0] != head+pad+tail {
		t.Errorf("got %d after %d requests, want the 503 after 1 that carried the whole body", resp.StatusCode, len(bodies))
	}
	if ds := decided.get(); len(ds) != 1 || ds[0].StopReason != policyd.StopIrreversibleOperation {
		t.Errorf("decisions %+v, want one stop: IRREVERSIBLE_OPERATION", ds)
	}
}

// The journal records a transport's request as it records Do's call.
func TestTransportJournal(t *testing.T) {
	t.Parallel()
	addr := journalDaemonAddr(t)
	_, journal := rawClients(t, addr)
	p := fakeProvider(t)
	p.MustFail(t, proctest.Failure{Status: 503})
	provider := fmt.Sprintf("transport-journal-%d", time.Now().UnixNano())
	c := newClient(t, addr, policyd.WithJournal(true), policyd.WithClock(newFakeClock()))
	hc := c.HTTPClient(policyd.TransportOptions{Provider: provider, Labels: map[string]string{"via": "transport"}})
	if resp, _ := send(t, hc, chatRequest(t, context.Background(), p.URL, chatBody)); resp.StatusCode != 200 {
		t.Fatalf("status %d, want the retry's 200", resp.StatusCode)
	}
	ctx := context.Background()
	var rc *policydv1.RetryContext
	waitFor(t, 5*time.Second, "the resolved context", func() bool {
		list, err := journal.ListContexts(ctx, &policydv1.ListContextsRequest{Provider: provider})
		if err != nil || len(list.GetContexts()) != 1 {
			return false
		}
		rc = list.GetContexts()[0]
		return rc.GetOutcome() == policydv1.Outcome_OUTCOME_RESOLVED
	})
	got, err := journal.GetContext(ctx, &policydv1.GetContextRequest{ContextId: rc.GetContextId()})
	if err != nil {
		t.Fatal(err)
	}
	if rc.GetOperation() != "chat" || rc.GetLabels()["via"] != "transport" || len(got.GetAttempts()) != 1 ||
		got.GetAttempts()[0].GetHttpStatus() != 503 || got.GetAttempts()[0].GetModel() != "gpt-4o" {
		t.Errorf("context %v with attempts %v, want the chat's 503 on gpt-4o, labelled", rc, got.GetAttempts())
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// Every response's rate-limit headers go to the fleet, a failure's too
// (policyd away here, so that they stay in the client's table).
func TestTransportObservesRateLimitsOfEveryResponse(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Ratelimit-Remaining-Requests", "0")
		w.Header().Set("X-Ratelimit-Reset-Requests", "20s")
		w.WriteHeader(http.StatusBadRequest) // not retried: one response
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, closedAddr(t), policyd.WithLogger(discardLogger()))
	resp, _ := send(t, c.HTTPClient(policyd.TransportOptions{KeyID: "limits"}), chatRequest(t, context.Background(), srv.URL, chatBody))
	u, _ := policyd.GateUsage(c, policyd.Call{Provider: "openai", Model: "gpt-4o", KeyID: "limits"})
	if resp.StatusCode != 400 || u.RateLimits["x-ratelimit-remaining-requests"] != "0" || u.RateLimits["x-ratelimit-reset-requests"] != "20s" {
		t.Errorf("status %d, the gate holds %v; want the 400's rate-limit headers", resp.StatusCode, u.RateLimits)
	}
}
