package policyd

import (
	"context"
	"log/slog"
	"testing"
	"time"
)

// BenchmarkCallSuccessNoOTel is Do's success path, the common case: a
// gated call to an admitted target whose first attempt succeeds (no RPC),
// with no OpenTelemetry provider installed. Its allocations are the
// client's own; the OpenTelemetry benchmarks compare against them.
func BenchmarkCallSuccessNoOTel(b *testing.B) {
	benchCallSuccess(b, context.Background())
}

// benchCallSuccess runs Do's success path with ctx, reporting allocations.
func benchCallSuccess(b *testing.B, ctx context.Context) {
	c := newClient(nil, newConfig([]Option{WithLogger(slog.New(slog.DiscardHandler))}))
	c.streamStarted.Store(true) // no stream: the benchmark measures the call
	call := Call{Provider: "openai", Model: "gpt-4o", KeyID: "bench", Operation: "chat"}
	tg, _ := targetOf(call)
	c.gate.assign(time.Now(), tg, &assignment{ttl: time.Hour, admitFraction: 1})
	ok := func(context.Context, int) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Do(ctx, call, ok); err != nil {
			b.Fatal(err)
		}
	}
}
