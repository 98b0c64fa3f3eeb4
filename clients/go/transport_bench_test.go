package policyd

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"
)

// stubRT answers every request at once with a small JSON success, so that
// the benchmark measures the transport's own work.
type stubRT struct{}

func (stubRT) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}, "X-Ratelimit-Remaining-Requests": {"10"}}, Body: io.NopCloser(strings.NewReader(`{"ok":true}`)), Request: r}, nil
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
