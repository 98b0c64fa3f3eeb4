package policyd

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
)

// pieces is a body read in the given pieces, then ending with err.
type pieces struct {
	parts []string
	err   error
}

func (p *pieces) Read(b []byte) (int, error) {
	if len(p.parts) == 0 {
		return 0, p.err
	}
	n := copy(b, p.parts[0])
	if p.parts[0] = p.parts[0][n:]; p.parts[0] == "" {
		p.parts = p.parts[1:]
	}
	return n, nil
}

func (p *pieces) Close() error { return nil }

// A success's output is the last count its body said, taken when the body
// ends or is closed; a body that breaks off, or that the caller's
// cancellation cuts, counts no output.
func TestTrackedBodyCountsTheLastOutput(t *testing.T) {
	// Anthropic's stream: 1 output token in message_start, 7 in message_delta at its end.
	start := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n"
	end := "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":7}}\n\n"
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name       string
		body       *pieces
		ctx        context.Context
		close      bool // closed by the caller after what it read
		wantOutput uint64
		wantCalls  uint64
	}{
		{name: "read to its end", body: &pieces{parts: []string{start, end[:30], end[30:]}, err: io.EOF}, ctx: context.Background(), wantOutput: 7, wantCalls: 1},
		{name: "closed after the last event", body: &pieces{parts: []string{start, end}}, ctx: context.Background(), close: true, wantOutput: 7, wantCalls: 1},
		{name: "broken off after message_start", body: &pieces{parts: []string{start}, err: errors.New("connection reset")}, ctx: context.Background()},
		{name: "cut by the caller's cancellation", body: &pieces{parts: []string{start}, err: context.Canceled}, ctx: cancelled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			co, clock := testCoordinator(t)
			c, tg := co.c, target{provider: "anthropic", model: "claude", keyID: "k"}
			c.gate.check(clock.now, tg, -1, gateCall{inputTokens: 30}, constRand(0.5), -1)
			resp := &http.Response{Body: tt.body}
			c.track(tt.ctx, tg, resp, 30)
			buf := make([]byte, 16)
			for {
				if _, err := resp.Body.Read(buf); err != nil {
					break
				}
				if tt.close && len(tt.body.parts) == 0 {
					break
				}
			}
			resp.Body.Close()
			var st fakeStream
			if err := co.sendReports(&st, reportActive); err != nil {
				t.Fatal(err)
			}
			u := usageOf(t, st.sent[0], "claude")
			if u.GetOutputTokensUsed() != tt.wantOutput || u.GetOutputTokensUsedCalls() != tt.wantCalls || u.GetInputTokensUsed() != 25 {
				t.Fatalf("reported %v; want %d output tokens of %d calls, 25 input tokens", u, tt.wantOutput, tt.wantCalls)
			}
		})
	}
}
