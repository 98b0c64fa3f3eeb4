package fakeprovider

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// clock is a settable clock for the provider.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newServer(t *testing.T, cfg Config) (*httptest.Server, *Provider, *clock) {
	t.Helper()
	c := &clock{now: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)}
	cfg.Now = c.Now
	p := New(cfg)
	s := httptest.NewServer(p)
	t.Cleanup(s.Close)
	return s, p, c
}

// post sends body to path with key, as the API at path expects it.
func post(t *testing.T, s *httptest.Server, path, key, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.URL+path, strings.NewReader(body))
	if strings.HasSuffix(path, "/messages") {
		req.Header.Set("x-api-key", key)
	} else {
		req.Header.Set("authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// prompt is a chat body whose prompt is tokens tokens long.
func prompt(tokens, maxTokens int, stream bool) string {
	b, _ := json.Marshal(map[string]any{"model": "m", "max_tokens": maxTokens, "stream": stream,
		"messages": []any{map[string]any{"role": "user", "content": strings.Repeat("abcd", tokens)}}})
	return string(b)
}

func TestOpenAITokenLimit(t *testing.T) {
	s, p, c := newServer(t, Config{Limits: Limits{Requests: 100, Tokens: 1000}, ReplyTokens: 10})
	// 400 prompt + 100 max_tokens are charged at admission (the headers
	// show that), and the 90 the 10-token reply left unused come back.
	for i, wantRemaining := range []string{"500", "90"} {
		resp := post(t, s, "/v1/chat/completions", "k1", prompt(400, 100, false))
		if resp.StatusCode != 200 {
			t.Fatalf("call %d: status %d", i, resp.StatusCode)
		}
		if got := resp.Header.Get("x-ratelimit-remaining-tokens"); got != wantRemaining {
			t.Errorf("call %d: remaining tokens %s, want %s", i, got, wantRemaining)
		}
		if got := resp.Header.Get("x-ratelimit-limit-tokens"); got != "1000" {
			t.Errorf("call %d: limit tokens %s", i, got)
		}
	}
	resp := post(t, s, "/v1/chat/completions", "k1", prompt(400, 100, false))
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 429 || !strings.Contains(string(body), `"code":"rate_limit_exceeded"`) || !strings.Contains(string(body), "tokens per min (TPM)") {
		t.Fatalf("third call: %d %s, want a TPM 429", resp.StatusCode, body)
	}
	// 320 tokens short: 320/1000 of a minute is 19.2 s until it fits.
	if !strings.Contains(string(body), "try again in 19.2s") {
		t.Errorf("429 body %s, want the wait", body)
	}
	if other := post(t, s, "/v1/chat/completions", "k2", prompt(400, 100, false)); other.StatusCode != 200 {
		t.Errorf("another key: status %d, want its own limit", other.StatusCode)
	}
	c.step(20 * time.Second)
	if resp := post(t, s, "/v1/chat/completions", "k1", prompt(400, 100, false)); resp.StatusCode != 200 {
		t.Errorf("after the refill: status %d", resp.StatusCode)
	}
	if st := p.Stats(); st.OK != 4 || st.RateLimited != 1 || st.InputTokens != 1600 || st.OutputTokens != 40 {
		t.Errorf("stats %+v", st)
	}
}

func TestAnthropicLimitsAndRetryAfter(t *testing.T) {
	s, _, c := newServer(t, Config{Limits: Limits{Requests: 2, InputTokens: 10000, OutputTokens: 1000}})
	for range 2 {
		if resp := post(t, s, "/v1/messages", "k", prompt(10, 100, false)); resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	resp := post(t, s, "/v1/messages", "k", prompt(10, 100, false))
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 429 || !strings.Contains(string(body), `"type":"rate_limit_error"`) {
		t.Fatalf("status %d %s, want an Anthropic 429", resp.StatusCode, body)
	}
	if got := resp.Header.Get("retry-after"); got != "30" { // one request of 2 a minute
		t.Errorf("retry-after %q, want 30", got)
	}
	reset, err := time.Parse(time.RFC3339, resp.Header.Get("anthropic-ratelimit-requests-reset"))
	if err != nil || reset.Sub(c.Now()) != time.Minute {
		t.Errorf("requests reset %v (%v), want a minute from now", reset, err)
	}
	if got := resp.Header.Get("anthropic-ratelimit-input-tokens-remaining"); got != "9980" {
		t.Errorf("input tokens remaining %s, want 9980", got)
	}
	if got := resp.Header.Get("anthropic-ratelimit-tokens-remaining"); got != "960" { // output is the tighter
		t.Errorf("tokens remaining %s, want the output tokens' 960", got)
	}
}

func TestStreams(t *testing.T) {
	s, p, _ := newServer(t, Config{ReplyTokens: 3})
	for _, tc := range []struct {
		path, last string
	}{{"/v1/chat/completions", "data: [DONE]"}, {"/v1/messages", `data: {"type":"message_stop"}`}} {
		resp := post(t, s, tc.path, "k", prompt(5, 50, true))
		var lines []string
		for sc := bufio.NewScanner(resp.Body); sc.Scan(); {
			if sc.Text() != "" {
				lines = append(lines, sc.Text())
			}
		}
		if resp.Header.Get("content-type") != "text/event-stream" || lines[len(lines)-1] != tc.last {
			t.Errorf("%s: %q ... %q", tc.path, resp.Header.Get("content-type"), lines[len(lines)-1])
		}
	}
	p.Fail(Failure{CutStream: true})
	resp := post(t, s, "/v1/chat/completions", "k", prompt(5, 50, true))
	got, err := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || err == nil || !strings.Contains(string(got), "ok! ") || strings.Contains(string(got), "[DONE]") {
		t.Errorf("cut stream: %d %q %v, want one chunk then a cut", resp.StatusCode, got, err)
	}
}

func TestInjectedFailures(t *testing.T) {
	s, p, _ := newServer(t, Config{})
	for _, bad := range []string{`{`, `{"count":2}`} {
		resp, _ := http.Post(s.URL+"/fake/fail", "application/json", strings.NewReader(bad))
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("fail %s: %d, want 400", bad, resp.StatusCode)
		}
	}
	resp, _ := http.Post(s.URL+"/fake/fail", "application/json", strings.NewReader(`{"status":529,"count":2,"retry_after":"3"}`))
	resp.Body.Close()
	for i, want := range []int{529, 529, 200} {
		resp := post(t, s, "/v1/messages", "k", prompt(1, 10, false))
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("call %d: %d, want %d", i, resp.StatusCode, want)
		}
		if want == 529 && (!strings.Contains(string(body), "overloaded_error") || resp.Header.Get("retry-after") != "3") {
			t.Errorf("call %d: %s retry-after %q", i, body, resp.Header.Get("retry-after"))
		}
	}
	if resp := post(t, s, "/v1/messages", "k", `{"model":`); resp.StatusCode != 400 {
		t.Errorf("bad JSON: %d, want 400", resp.StatusCode)
	}
	if resp := post(t, s, "/v1/messages", "", prompt(1, 1, false)); resp.StatusCode != 401 {
		t.Errorf("no key: %d, want 401", resp.StatusCode)
	}
	if st := p.Stats(); st.Failed != 2 || st.OK != 1 {
		t.Errorf("stats %+v", st)
	}
}
