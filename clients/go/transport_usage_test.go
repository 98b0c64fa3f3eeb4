package policyd_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	policyd "github.com/policyd/policyd/clients/go"
	policydv1 "github.com/policyd/policyd/clients/go/internal/gen/policyd/v1"
)

// reportLog records the Coordinate messages a client sends to policyd,
// and the error that ended each of its streams.
type reportLog struct {
	mu     sync.Mutex
	sent   []*policydv1.CoordinateRequest
	broken []error
}

func (l *reportLog) option() policyd.Option {
	return policyd.WithDialOptions(grpc.WithStreamInterceptor(
		func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			cs, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return nil, err
			}
			return &recordedStream{ClientStream: cs, log: l}, nil
		}))
}

type recordedStream struct {
	grpc.ClientStream
	log *reportLog
}

func (s *recordedStream) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	if req, ok := m.(*policydv1.CoordinateRequest); ok && err == nil {
		s.log.mu.Lock()
		s.log.sent = append(s.log.sent, proto.Clone(req).(*policydv1.CoordinateRequest))
		s.log.mu.Unlock()
	}
	return err
}

func (s *recordedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		s.log.mu.Lock()
		s.log.broken = append(s.log.broken, err)
		s.log.mu.Unlock()
	}
	return err
}

// reportTotals are what the reports sent said of one target, summed.
type reportTotals struct{ admitted, used, estimated, output, outputCalls uint64 }

// totals sums what the reports sent said of model's target.
func (l *reportLog) totals(model string) reportTotals {
	l.mu.Lock()
	defer l.mu.Unlock()
	var t reportTotals
	for _, m := range l.sent {
		for _, u := range m.GetUsage() {
			if u.GetTarget().GetModel() == model {
				t.admitted += u.GetAdmitted()
				t.used += u.GetInputTokensUsed()
				t.estimated += u.GetInputTokensEstimatedForUsed()
				t.output += u.GetOutputTokensUsed()
				t.outputCalls += u.GetOutputTokensUsedCalls()
			}
		}
	}
	return t
}

// The transport reads what each success used as the SDK reads its body,
// an OpenAI or Anthropic JSON reply or event stream from the real fake
// provider, and reports it to a real policyd with the call's estimate
// (ceil(body bytes / 4)), and the output tokens each call produced (the
// last count the body said: Anthropic's stream says 1, then 3); a body
// closed unread reports no usage. The fake counts only the messages' text,
// so that the two differ. Each target has two calls, the second closed
// unread.
func TestTransportReportsWhatResponsesUsed(t *testing.T) {
	t.Parallel()
	d := gateDaemon(t, "")
	p := fakeProvider(t, "-reply-tokens", "3")
	var reports reportLog
	c := newClient(t, d.addr, reports.option())
	hc := c.HTTPClient(policyd.TransportOptions{KeyID: "usage"})

	text := strings.Repeat("Count these words. ", 20) // 380 bytes: 95 tokens to the fake
	const used = 95
	msgs := fmt.Sprintf(`"messages":[{"role":"user","content":%q}]`, text)
	tests := []struct {
		model, path, body string
		read              bool // read the body to its end; else close it unread
		want, wantOutput  uint64
	}{
		{model: "gpt-4o", path: "/v1/chat/completions", body: `{"model":"gpt-4o",` + msgs + `}`, read: true, want: used, wantOutput: 3},
		{model: "gpt-4o-mini", path: "/v1/chat/completions", read: true, want: used, wantOutput: 3,
			body: `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},` + msgs + `}`},
		{model: "claude-sonnet-4-5", path: "/v1/messages", body: `{"model":"claude-sonnet-4-5","max_tokens":16,` + msgs + `}`, read: true, want: used, wantOutput: 3},
		{model: "claude-haiku-4-5", path: "/v1/messages", read: true, want: used, wantOutput: 3,
			body: `{"model":"claude-haiku-4-5","max_tokens":16,"stream":true,` + msgs + `}`},
		{model: "gpt-4.1", path: "/v1/chat/completions", body: `{"model":"gpt-4.1",` + msgs + `}`},
	}
	do := func(model, path, body string, read bool) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, p.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer k1")
		req.Header.Set("x-api-key", "k1")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", model, err)
		}
		var got []byte
		if read {
			got, err = io.ReadAll(resp.Body)
		}
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || read && !strings.Contains(string(got), "_tokens") {
			t.Fatalf("%s: %d %q %v, want the fake's success with its usage", model, resp.StatusCode, got, err)
		}
	}
	for _, tt := range tests {
		do(tt.model, tt.path, tt.body, tt.read)
		// A second call closed unread: its admission carries the first's
		// usage if that was read after the report that counted the first.
		do(tt.model, tt.path, tt.body, false)
	}
	// The reports go about once a second; a usage comes with its call's
	// admission or in a later report.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		all := true
		for _, tt := range tests {
			if r := reports.totals(tt.model); r.admitted != 2 || r.used != tt.want || r.output != tt.wantOutput {
				all = false
			}
		}
		if all {
			break
		}
	}
	for _, tt := range tests {
		estimate := uint64(len(tt.body)+3) / 4
		if tt.want == 0 {
			estimate = 0
		}
		wantCalls := uint64(0)
		if tt.wantOutput > 0 {
			wantCalls = 1
		}
		if r := reports.totals(tt.model); r.admitted != 2 || r.used != tt.want || r.estimated != estimate ||
			r.output != tt.wantOutput || r.outputCalls != wantCalls {
			t.Errorf("%s: reported %d admitted, %d tokens used for %d estimated, %d output tokens of %d calls; want 2, %d for %d, %d of %d",
				tt.model, r.admitted, r.used, r.estimated, r.output, r.outputCalls, tt.want, estimate, tt.wantOutput, wantCalls)
		}
	}
	reports.mu.Lock()
	defer reports.mu.Unlock()
	for _, err := range reports.broken {
		if status.Code(err) == codes.InvalidArgument {
			t.Errorf("policyd refused a report: %v", err)
		}
	}
}

// The whole chain of output-token pacing, real processes: Anthropic's
// output-token headers from the fake provider reach policyd in two
// clients' reports (a second client corroborates the limit), with the
// output each reply produced read from its body; policyd paces the bucket
// on that limit and shows it in FleetService's limit views.
func TestTransportOutputTokensPaceTheFleet(t *testing.T) {
	t.Parallel()
	d := gateDaemon(t, "")
	// 600 output tokens a minute (10 a second), every reply 50 tokens.
	p := fakeProvider(t, "-otpm", "600", "-reply-tokens", "50")
	body := `{"model":"claude-out","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`
	for _, id := range []string{"agent-1", "agent-2"} {
		c := newClient(t, d.addr, policyd.WithClientID(id))
		hc := c.HTTPClient(policyd.TransportOptions{KeyID: "otpm"})
		for range 3 {
			req, err := http.NewRequest(http.MethodPost, p.URL+"/v1/messages", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("x-api-key", "otpm")
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 || !strings.Contains(string(got), `"output_tokens":50`) {
				t.Fatalf("%d %q %v, want the fake's reply of 50 output tokens", resp.StatusCode, got, err)
			}
		}
	}
	fc := policydv1.NewFleetServiceClient(rawGRPC(t, d.addr))
	var b *policydv1.Bucket
	var output *policydv1.ProviderLimit
	waitFor(t, 10*time.Second, "the output-token limit pacing the bucket", func() bool {
		resp, err := fc.GetBucket(context.Background(), &policydv1.GetBucketRequest{Bucket: "rate_limit:anthropic/claude-out@otpm"})
		if err != nil {
			return false
		}
		b = resp.GetBucket()
		for _, l := range b.GetLimits() {
			if l.GetName() == "output_tokens" {
				output = l
			}
		}
		return output.GetPacing() && b.GetAdmitFraction() < 1
	})
	// Six calls of 50 output tokens over the 10-s window: 30 a second
	// against 93 % of 10; about 0.31 of first attempts.
	if output.GetPerMinute() != 600 || b.GetAdmitFraction() > 0.5 {
		t.Fatalf("output limit %v, admit fraction %.3f; want 600 a minute pacing well under half", output, b.GetAdmitFraction())
	}
}
