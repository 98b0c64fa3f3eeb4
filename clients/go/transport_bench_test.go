package policyd

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"
)

// stubRT answers every request at once with a small JSON success (with
// its usage, which the transport reads), so that the benchmark measures
// the transport's own work.
type stubRT struct{}

const stubReply = `{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o-mini","choices":[{"index":0,"finish_reason":"stop",` +
	`"message":{"role":"assistant","content":"ok! ok! ok! ok!"}}],"usage":{"prompt_tokens":240,"completion_tokens":4,"total_tokens":244}}`

func (stubRT) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}, "X-Ratelimit-Remaining-Requests": {"10"}}, Body: io.NopCloser(strings.NewReader(stubReply)), Request: r}, nil
}

// BenchmarkTransportOverhead is a chat request of about 1 KiB through the
// transport to an admitted target, against the same request through the
// bare RoundTripper (scripts/bench.sh measures the two end to end).
func BenchmarkTransportOverhead(b *testing.B) {
	body := `{"model":"gpt-4o-mini","max_tokens":16,"messages":[{"role":"user","content":"` + strings.Repeat("Summarise this. ", 60) + `"}]}`
	c := newClient(nil, newConfig([]Option{WithLogger(slog.New(slog.DiscardHandler))}))
	c.streamStarted.Store(true)
	tg := target{provider: "openai", model: "gpt-4o-mini", keyID: "bench"}
	c.gate.assign(time.Now(), tg, &assignment{ttl: time.Hour, admitFraction: 1})
	for _, mode := range []string{"bare", "transport"} {
		var rt http.RoundTripper = stubRT{}
		if mode == "transport" {
			rt = c.RoundTripper(stubRT{}, TransportOptions{KeyID: "bench"})
		}
		b.Run(mode, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				req, _ := http.NewRequest("POST", "http://127.0.0.1:1/v1/chat/completions", strings.NewReader(body))
				resp, err := rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}

// BenchmarkUsageScanner is the scan of a chat reply of about 1 KiB read in
// 512-byte pieces, as io.ReadAll starts.
func BenchmarkUsageScanner(b *testing.B) {
	body := []byte(`{"id":"chatcmpl-1","choices":[{"message":{"role":"assistant","content":"` + strings.Repeat("Summarise this. ", 60) +
		`"}}],"usage":{"prompt_tokens":240,"completion_tokens":4,"total_tokens":244}}`)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		var s usageScanner
		for p := body; len(p) > 0; p = p[min(len(p), 512):] {
			s.scan(p[:min(len(p), 512)])
		}
		if _, ok := s.found(); !ok {
			b.Fatal("no count")
		}
	}
}
