// Package fakeprovider is a local stand-in for an LLM provider's HTTP API,
// for tests that drive the real OpenAI and Anthropic SDKs through policyd's
// transports. It serves OpenAI's POST /v1/chat/completions and Anthropic's
// POST /v1/messages, streaming included, and enforces request and token
// limits per API key with the headers and 429 bodies those providers
// document:
//
//   - OpenAI (platform docs, "Rate limits"): x-ratelimit-{limit,remaining,
//     reset}-{requests,tokens}, the reset as a duration ("1s", "6m0s");
//     tokens counted at admission as the prompt plus max_tokens;
//   - Anthropic (API docs, "Rate limits"): anthropic-ratelimit-{requests,
//     tokens,input-tokens,output-tokens}-{limit,remaining,reset}, the reset
//     as an RFC 3339 time, retry-after on a 429; output tokens estimated
//     from max_tokens at admission and corrected when the reply ends.
//
// A token here is four bytes of message text, the rule of thumb both
// providers give; the fake needs a rule, not a tokenizer. Failures are
// injected through POST /fake/fail, and GET /fake/stats counts what came.
package fakeprovider

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Limits are one API key's limits a minute; 0 is no limit.
type Limits struct {
	Requests     int64 // both APIs
	Tokens       int64 // OpenAI: prompt and completion together
	InputTokens  int64 // Anthropic
	OutputTokens int64 // Anthropic
}

// Config configures a Provider.
type Config struct {
	Limits Limits
	// ReplyTokens is the length of every reply (cut to max_tokens).
	ReplyTokens int64
	// ChunkDelay is the pause between a streamed reply's chunks.
	ChunkDelay time.Duration
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Provider is the fake provider: an http.Handler.
type Provider struct {
	cfg Config
	mux *http.ServeMux

	mu    sync.Mutex
	keys  map[string]*keyLimits
	fail  []Failure
	stats Stats
}

// keyLimits is one API key's buckets.
type keyLimits struct {
	requests, tokens, input, output *bucket
}

// Stats counts what the provider answered.
type Stats struct {
	Requests     int64 `json:"requests"`
	OK           int64 `json:"ok"`
	RateLimited  int64 `json:"rate_limited"`
	Failed       int64 `json:"failed"` // injected failures
	Streams      int64 `json:"streams"`
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

// Failure is an injected failure: the next Count requests (1 when 0) get it.
type Failure struct {
	// Status is the HTTP status (e.g. 503, 529); 0 with CutStream.
	Status int `json:"status"`
	// Body replaces the provider's usual body for the status.
	Body  string `json:"body,omitempty"`
	Count int    `json:"count,omitempty"`
	// RetryAfter is sent as the retry-after header (seconds), when set.
	RetryAfter string `json:"retry_after,omitempty"`
	// CutStream: a streamed reply sends its first chunk, then the
	// connection is cut (a non-streamed request gets a cut connection).
	CutStream bool `json:"cut_stream,omitempty"`
}

// New returns a provider.
func New(cfg Config) *Provider {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ReplyTokens <= 0 {
		cfg.ReplyTokens = 20
	}
	p := &Provider{cfg: cfg, keys: map[string]*keyLimits{}, mux: http.NewServeMux()}
	p.mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { p.serve(w, r, openAI) })
	p.mux.HandleFunc("POST /v1/messages", func(w http.ResponseWriter, r *http.Request) { p.serve(w, r, anthropic) })
	p.mux.HandleFunc("POST /fake/fail", p.injectFailure)
	p.mux.HandleFunc("GET /fake/stats", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("content-type", "application/json")
		_ = json.NewEncoder(w).Encode(p.Stats())
	})
	return p
}

// ServeHTTP serves the APIs and the /fake control endpoints.
func (p *Provider) ServeHTTP(w http.ResponseWriter, r *http.Request) { p.mux.ServeHTTP(w, r) }

// Stats returns the counts so far.
func (p *Provider) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Fail queues an injected failure.
func (p *Provider) Fail(f Failure) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fail = append(p.fail, f)
}

func (p *Provider) injectFailure(w http.ResponseWriter, r *http.Request) {
	var f Failure
	if err := json.NewDecoder(r.Body).Decode(&f); err != nil {
		http.Error(w, "body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if f.Status == 0 && !f.CutStream {
		http.Error(w, "status: required unless cut_stream", http.StatusBadRequest)
		return
	}
	p.Fail(f)
	w.WriteHeader(http.StatusNoContent)
}

// nextFailure takes one injected failure, if any is queued.
func (p *Provider) nextFailure() (Failure, bool) {
	if len(p.fail) == 0 {
		return Failure{}, false
	}
	f := p.fail[0]
	if f.Count <= 1 {
		p.fail = p.fail[1:]
	} else {
		p.fail[0].Count--
	}
	return f, true
}

// request is what the fake reads of a request body.
type request struct {
	Model               string          `json:"model"`
	Stream              bool            `json:"stream"`
	MaxTokens           int64           `json:"max_tokens"`
	MaxCompletionTokens int64           `json:"max_completion_tokens"`
	Messages            []message       `json:"messages"`
	System              json.RawMessage `json:"system"`
	StreamOptions       struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type message struct {
	Content json.RawMessage `json:"content"`
}

// inputTokens counts the request's text at four bytes a token.
func (q *request) inputTokens() int64 {
	n := textBytes(q.System)
	for _, m := range q.Messages {
		n += textBytes(m.Content)
	}
	return int64(math.Ceil(float64(n) / 4))
}

// textBytes is the length of a content field: a string, or a list of parts
// with text.
func textBytes(raw json.RawMessage) int {
	if len(raw) == 0 {
		return 0
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return len(s)
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) == nil {
		n := 0
		for _, p := range parts {
			n += len(p.Text)
		}
		return n
	}
	return len(raw)
}

// api is one provider's dialect.
type api int

const (
	openAI api = iota
	anthropic
)

func (p *Provider) serve(w http.ResponseWriter, r *http.Request, a api) {
	var q request
	if err := json.NewDecoder(r.Body).Decode(&q); err != nil {
		writeError(w, a, http.StatusBadRequest, "invalid_request_error", "the body is not valid JSON: "+err.Error())
		return
	}
	key := apiKey(r, a)
	if key == "" {
		writeError(w, a, http.StatusUnauthorized, "authentication_error", "no API key")
		return
	}
	out := q.MaxTokens
	if q.MaxCompletionTokens > 0 {
		out = q.MaxCompletionTokens
	}
	if out <= 0 {
		out = p.cfg.ReplyTokens
	}
	in, reply := q.inputTokens(), min(out, p.cfg.ReplyTokens)

	p.mu.Lock()
	now := p.cfg.Now()
	p.stats.Requests++
	if f, ok := p.nextFailure(); ok {
		p.stats.Failed++
		p.mu.Unlock()
		p.writeFailure(w, a, q, f)
		return
	}
	k := p.limitsFor(key, now)
	limited, why, wait := k.admit(a, in, out)
	p.writeLimitHeaders(w.Header(), a, k, now)
	if limited {
		p.stats.RateLimited++
		p.mu.Unlock()
		writeRateLimited(w, a, q.Model, why, wait)
		return
	}
	// The reply is known now: correct the estimate at once (a real
	// provider does when the reply ends).
	k.settle(a, out, reply)
	p.stats.OK++
	p.stats.InputTokens += in
	p.stats.OutputTokens += reply
	if q.Stream {
		p.stats.Streams++
	}
	p.mu.Unlock()

	if q.Stream {
		p.stream(w, a, q, in, reply, false)
		return
	}
	w.Header().Set("content-type", "application/json")
	_ = json.NewEncoder(w).Encode(wholeReply(a, q.Model, in, reply))
}

// apiKey is the request's key: Anthropic's x-api-key, or a bearer token
// (OpenAI's, and the Anthropic SDKs' when built with an auth token).
func apiKey(r *http.Request, a api) string {
	if k := r.Header.Get("x-api-key"); a == anthropic && k != "" {
		return k
	}
	return strings.TrimPrefix(r.Header.Get("authorization"), "Bearer ")
}

func (p *Provider) limitsFor(key string, now time.Time) *keyLimits {
	k, ok := p.keys[key]
	if !ok {
		l := p.cfg.Limits
		k = &keyLimits{newBucket(l.Requests, now), newBucket(l.Tokens, now), newBucket(l.InputTokens, now), newBucket(l.OutputTokens, now)}
		p.keys[key] = k
	}
	for _, b := range k.all() {
		b.refill(now)
	}
	return k
}

func (k *keyLimits) all() []*bucket { return []*bucket{k.requests, k.tokens, k.input, k.output} }

// admit charges one request of in input tokens and at most out output
// tokens, or says which limit refuses it and how long until it would fit.
func (k *keyLimits) admit(a api, in, out int64) (limited bool, why string, wait time.Duration) {
	type need struct {
		b    *bucket
		n    float64
		name string
	}
	needs := []need{{k.requests, 1, "requests"}}
	if a == openAI {
		needs = append(needs, need{k.tokens, float64(in + out), "tokens"})
	} else {
		needs = append(needs, need{k.input, float64(in), "input_tokens"}, need{k.output, float64(out), "output_tokens"})
	}
	for _, n := range needs {
		if !n.b.fits(n.n) {
			return true, n.name, n.b.wait(n.n)
		}
	}
	for _, n := range needs {
		n.b.take(n.n)
	}
	return false, "", 0
}

// settle gives back the output tokens estimated but not used.
func (k *keyLimits) settle(a api, estimated, used int64) {
	b := k.tokens
	if a == anthropic {
		b = k.output
	}
	b.take(float64(used - estimated))
}

func (p *Provider) writeLimitHeaders(h http.Header, a api, k *keyLimits, now time.Time) {
	if a == openAI {
		for _, l := range []struct {
			name string
			b    *bucket
		}{{"requests", k.requests}, {"tokens", k.tokens}} {
			if l.b.limit == 0 {
				continue
			}
			h.Set("x-ratelimit-limit-"+l.name, fmt.Sprint(int64(l.b.limit)))
			h.Set("x-ratelimit-remaining-"+l.name, fmt.Sprint(l.b.remaining()))
			h.Set("x-ratelimit-reset-"+l.name, l.b.reset().Round(time.Millisecond).String())
		}
		return
	}
	// The tokens headers show the most restrictive token limit.
	tokens := k.input
	if k.output.limit > 0 && (k.input.limit == 0 || k.output.remaining() < k.input.remaining()) {
		tokens = k.output
	}
	for _, l := range []struct {
		name string
		b    *bucket
	}{{"requests", k.requests}, {"tokens", tokens}, {"input-tokens", k.input}, {"output-tokens", k.output}} {
		if l.b.limit == 0 {
			continue
		}
		h.Set("anthropic-ratelimit-"+l.name+"-limit", fmt.Sprint(int64(l.b.limit)))
		h.Set("anthropic-ratelimit-"+l.name+"-remaining", fmt.Sprint(l.b.remaining()))
		h.Set("anthropic-ratelimit-"+l.name+"-reset", now.Add(l.b.reset()).UTC().Format(time.RFC3339))
	}
}

// writeRateLimited answers a 429 as each provider does.
func writeRateLimited(w http.ResponseWriter, a api, model, limit string, wait time.Duration) {
	if a == openAI {
		unit := map[string]string{"requests": "requests per min (RPM)", "tokens": "tokens per min (TPM)"}[limit]
		writeError(w, a, http.StatusTooManyRequests, limit, fmt.Sprintf(
			"Rate limit reached for %s in organization org-fake on %s. Please try again in %v.", model, unit, wait.Round(time.Millisecond)))
		return
	}
	w.Header().Set("retry-after", fmt.Sprint(int64(math.Ceil(wait.Seconds()))))
	writeError(w, a, http.StatusTooManyRequests, "rate_limit_error", fmt.Sprintf(
		"This request would exceed the rate limit for your organization of %s per minute.", strings.ReplaceAll(limit, "_", " ")))
}

// writeError writes an error body in the API's shape.
func writeError(w http.ResponseWriter, a api, status int, typ, msg string) {
	w.Header().Set("content-type", "application/json")
	w.WriteHeader(status)
	if a == openAI {
		code := any(nil)
		if status == http.StatusTooManyRequests {
			code = "rate_limit_exceeded"
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": code}})
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})
}

func (p *Provider) writeFailure(w http.ResponseWriter, a api, q request, f Failure) {
	if f.CutStream {
		if q.Stream {
			p.stream(w, a, q, q.inputTokens(), p.cfg.ReplyTokens, true)
			return
		}
		cut(w)
		return
	}
	if f.RetryAfter != "" {
		w.Header().Set("retry-after", f.RetryAfter)
	}
	if f.Body != "" {
		w.Header().Set("content-type", "application/json")
		w.WriteHeader(f.Status)
		_, _ = w.Write([]byte(f.Body))
		return
	}
	typ, msg := "server_error", "The server had an error while processing your request."
	switch {
	case a == anthropic && f.Status == 529:
		typ, msg = "overloaded_error", "Overloaded"
	case a == anthropic:
		typ, msg = "api_error", "Internal server error"
	}
	writeError(w, a, f.Status, typ, msg)
}

// cut closes the connection without an answer.
func cut(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}
