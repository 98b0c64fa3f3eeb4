package policyd

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// Do's success path, the common case: a gated call to an admitted target
// whose first attempt succeeds (no RPC). Without an OpenTelemetry SDK, or
// with the API's no-op providers, it allocates exactly what it did before
// the client knew OpenTelemetry (one run, 384 bytes); with an SDK and a
// recording span too, as a call that succeeds at once records nothing.

// BenchmarkCallSuccessNoOTel: no provider installed (the API's defaults).
func BenchmarkCallSuccessNoOTel(b *testing.B) {
	benchCallSuccess(b, context.Background())
}

// BenchmarkCallSuccessNoopOTel: the API's no-op meter provider installed,
// and a no-op tracer's span in the context.
func BenchmarkCallSuccessNoopOTel(b *testing.B) {
	setMeterProvider(b, metricnoop.NewMeterProvider())
	ctx, span := tracenoop.NewTracerProvider().Tracer("bench").Start(context.Background(), "call")
	defer span.End()
	benchCallSuccess(b, ctx)
}

// BenchmarkCallSuccessSDK: the SDK's meter provider and a recording span.
func BenchmarkCallSuccessSDK(b *testing.B) {
	setMeterProvider(b, sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())))
	ctx, span := sdktrace.NewTracerProvider().Tracer("bench").Start(context.Background(), "call")
	defer span.End()
	benchCallSuccess(b, ctx)
}

// TestCallSuccessAllocatesNothingForOTel: the success path allocates the
// same with no provider, the no-op ones, and an SDK with a recording span.
// Not parallel: it sets the global meter provider.
func TestCallSuccessAllocatesNothingForOTel(t *testing.T) {
	none := callSuccessAllocs(t, context.Background())
	setMeterProvider(t, metricnoop.NewMeterProvider())
	noopCtx, noopSpan := tracenoop.NewTracerProvider().Tracer("test").Start(context.Background(), "call")
	defer noopSpan.End()
	noop := callSuccessAllocs(t, noopCtx)
	setMeterProvider(t, sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())))
	sdkCtx, sdkSpan := sdktrace.NewTracerProvider().Tracer("test").Start(context.Background(), "call")
	defer sdkSpan.End()
	sdk := callSuccessAllocs(t, sdkCtx)
	// The one allocation is the run (a call's state); OpenTelemetry adds none.
	if none != 1 || noop != 1 || sdk != 1 {
		t.Fatalf("allocations per successful call: %v without OpenTelemetry, %v with the no-op providers, %v with an SDK; want 1 each",
			none, noop, sdk)
	}
}

// setMeterProvider installs mp globally, and the no-op provider when tb
// ends (the global provider cannot go back to its default).
func setMeterProvider(tb testing.TB, mp metric.MeterProvider) {
	otel.SetMeterProvider(mp)
	tb.Cleanup(func() {
		otel.SetMeterProvider(metricnoop.NewMeterProvider())
		if sdk, ok := mp.(*sdkmetric.MeterProvider); ok {
			_ = sdk.Shutdown(context.Background())
		}
	})
}

// successClient is a client whose gate admits Call{Provider: "openai",
// Model: "gpt-4o", KeyID: "bench"}, without a stream.
func successClient() (*Client, Call) {
	c := newClient(nil, newConfig([]Option{WithLogger(slog.New(slog.DiscardHandler))}))
	c.streamStarted.Store(true) // no stream: only the call is measured
	call := Call{Provider: "openai", Model: "gpt-4o", KeyID: "bench", Operation: "chat"}
	tg, _ := targetOf(call)
	c.gate.assign(time.Now(), tg, &assignment{ttl: time.Hour, admitFraction: 1})
	return c, call
}

func succeed(context.Context, int) error { return nil }

// benchCallSuccess runs Do's success path with ctx, reporting allocations.
func benchCallSuccess(b *testing.B, ctx context.Context) {
	c, call := successClient()
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Do(ctx, call, succeed); err != nil {
			b.Fatal(err)
		}
	}
}

func callSuccessAllocs(t *testing.T, ctx context.Context) float64 {
	c, call := successClient()
	return testing.AllocsPerRun(1000, func() {
		if err := c.Do(ctx, call, succeed); err != nil {
			t.Fatal(err)
		}
	})
}
