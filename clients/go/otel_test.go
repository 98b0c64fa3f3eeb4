package policyd_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	policyd "github.com/policyd/policyd/clients/go"
)

// OpenTelemetry against real policyd processes (docs/clients.md, "Tracing
// and metrics"): the SDK's in-memory span exporter and a manual metric
// reader see what the client records, and every name it uses is one of
// clients/testdata/otel.json's. Not parallel: the meter is the global one.

// otelSpec is clients/testdata/otel.json.
type otelSpec struct {
	SpanEvent struct {
		Name       string            `json:"name"`
		Attributes map[string]string `json:"attributes"`
	} `json:"span_event"`
	SpanAttributes map[string]string `json:"span_attributes"`
	Metrics        []otelMetric      `json:"metrics"`
}

type otelMetric struct {
	Name       string   `json:"name"`
	Kind       string   `json:"kind"`
	Unit       string   `json:"unit"`
	Attributes []string `json:"attributes"`
}

func readOTelSpec(t *testing.T) otelSpec {
	t.Helper()
	b, err := os.ReadFile("../testdata/otel.json")
	if err != nil {
		t.Fatal(err)
	}
	var spec otelSpec
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatalf("otel.json: %v", err)
	}
	if spec.SpanEvent.Name == "" || len(spec.SpanEvent.Attributes) == 0 || len(spec.SpanAttributes) == 0 || len(spec.Metrics) == 0 {
		t.Fatalf("otel.json names nothing: %+v", spec)
	}
	return spec
}

// otelRecorder is an OpenTelemetry SDK that keeps everything: spans in
// memory, metrics for a manual read. Clients made after it record into it.
type otelRecorder struct {
	spans  *tracetest.InMemoryExporter
	tracer *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
}

func newOTelRecorder(t *testing.T) *otelRecorder {
	r := &otelRecorder{spans: tracetest.NewInMemoryExporter(), reader: sdkmetric.NewManualReader()}
	r.tracer = sdktrace.NewTracerProvider(sdktrace.WithSyncer(r.spans))
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	otel.SetMeterProvider(meters)
	t.Cleanup(func() {
		otel.SetMeterProvider(metricnoop.NewMeterProvider()) // the global provider has no way back to its default
		_ = meters.Shutdown(context.Background())
		_ = r.tracer.Shutdown(context.Background())
	})
	return r
}

// span runs fn under a new span, the caller's, and returns it ended.
func (r *otelRecorder) span(t *testing.T, fn func(ctx context.Context)) tracetest.SpanStub {
	t.Helper()
	r.spans.Reset()
	ctx, span := r.tracer.Tracer("agent").Start(context.Background(), "agent.call")
	fn(ctx)
	span.End()
	got := r.spans.GetSpans()
	if len(got) != 1 {
		t.Fatalf("%d spans exported, want the caller's one", len(got))
	}
	return got[0]
}

// metrics reads every metric recorded so far, by name.
func (r *otelRecorder) metrics(t *testing.T) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// attrs is a set of attributes as a map of their values.
func attrs(kvs []attribute.KeyValue) map[string]any {
	out := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		out[string(kv.Key)] = kv.Value.AsInterface()
	}
	return out
}

// decisionEvents are span's decision events' attributes, in order.
func decisionEvents(span tracetest.SpanStub) []map[string]any {
	var out []map[string]any
	for _, e := range span.Events {
		if e.Name == "policyd.decision" {
			out = append(out, attrs(e.Attributes))
		}
	}
	return out
}

// wantEvent checks that span has exactly one decision event, with want's
// attributes (a func(any) bool value checks rather than compares), and
// no other.
func wantEvent(t *testing.T, span tracetest.SpanStub, want map[string]any) map[string]any {
	t.Helper()
	events := decisionEvents(span)
	if len(events) != 1 {
		t.Fatalf("decision events %v, want one", events)
	}
	got := events[0]
	for k, w := range want {
		if check, ok := w.(func(any) bool); ok {
			if !check(got[k]) {
				t.Errorf("event attribute %s = %v (%T): not as wanted", k, got[k], got[k])
			}
		} else if got[k] != w {
			t.Errorf("event attribute %s = %v (%T), want %v (%T)", k, got[k], got[k], w, w)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("event attribute %s = %v: not expected", k, got[k])
		}
	}
	return got
}

// wantResends checks the span's http.request.resend_count: n, or absent when 0.
func wantResends(t *testing.T, span tracetest.SpanStub, n int64) {
	t.Helper()
	got, ok := attrs(span.Attributes)["http.request.resend_count"]
	if n == 0 && ok || n > 0 && got != n {
		t.Errorf("http.request.resend_count = %v (set %v), want %d (absent when 0)", got, ok, n)
	}
}

// retriesOf is the retry counter's points: attributes → value.
func retriesOf(t *testing.T, ms map[string]metricdata.Metrics) map[attribute.Distinct]int64 {
	t.Helper()
	m, ok := ms["policyd.client.retries"]
	if !ok {
		return nil
	}
	sum, ok := m.Data.(metricdata.Sum[int64])
	if !ok || !sum.IsMonotonic {
		t.Fatalf("policyd.client.retries is %T, want a monotonic int64 sum (a counter)", m.Data)
	}
	out := map[attribute.Distinct]int64{}
	for _, p := range sum.DataPoints {
		out[p.Attributes.Equivalent()] = p.Value
	}
	return out
}

// waitsOf is the wait histogram's points.
func waitsOf(t *testing.T, ms map[string]metricdata.Metrics) []metricdata.HistogramDataPoint[float64] {
	t.Helper()
	m, ok := ms["policyd.client.wait"]
	if !ok {
		return nil
	}
	h, ok := m.Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("policyd.client.wait is %T, want a float64 histogram", m.Data)
	}
	return h.DataPoints
}

func set(kvs ...attribute.KeyValue) *attribute.Set { s := attribute.NewSet(kvs...); return &s }

var gpt4oAttrs = []attribute.KeyValue{attribute.String("policyd.provider", "openai"), attribute.String("policyd.model", "gpt-4o")}

// wantRetry checks one retry of errorType and one wait of kind and
// seconds (within 1 ms), on openai/gpt-4o.
func wantRetryAndWait(t *testing.T, ms map[string]metricdata.Metrics, errorType, kind string, seconds float64) {
	t.Helper()
	retries := retriesOf(t, ms)
	key := set(append([]attribute.KeyValue{attribute.String("error.type", errorType)}, gpt4oAttrs...)...).Equivalent()
	if errorType == "" {
		if len(retries) != 0 {
			t.Errorf("retries %v, want none", retries)
		}
	} else if len(retries) != 1 || retries[key] != 1 {
		t.Errorf("retries %v, want 1 with error.type %s on openai/gpt-4o", retries, errorType)
	}
	waits := waitsOf(t, ms)
	if len(waits) != 1 || waits[0].Count != 1 || waits[0].Sum < seconds-0.001 || waits[0].Sum > seconds+0.001 ||
		!waits[0].Attributes.Equals(set(append([]attribute.KeyValue{attribute.String("policyd.wait.kind", kind)}, gpt4oAttrs...)...)) {
		t.Errorf("waits %+v, want one of %.3f s, kind %s, on openai/gpt-4o", waits, seconds, kind)
	}
}

// usedNames checks that every name span and ms use is otel.json's, with
// its kind and unit, and adds them to used.
func usedNames(t *testing.T, spec otelSpec, span tracetest.SpanStub, ms map[string]metricdata.Metrics, used map[string]bool) {
	t.Helper()
	for _, e := range span.Events {
		if e.Name != spec.SpanEvent.Name {
			t.Errorf("span event %q is not otel.json's %q", e.Name, spec.SpanEvent.Name)
		}
		used["event:"+e.Name] = true
		for _, kv := range e.Attributes {
			if _, ok := spec.SpanEvent.Attributes[string(kv.Key)]; !ok {
				t.Errorf("event attribute %q is not in otel.json", kv.Key)
			}
			used["event attribute:"+string(kv.Key)] = true
		}
	}
	for _, kv := range span.Attributes {
		if _, ok := spec.SpanAttributes[string(kv.Key)]; !ok {
			t.Errorf("span attribute %q is not in otel.json", kv.Key)
		}
		used["span attribute:"+string(kv.Key)] = true
	}
	for name, m := range ms {
		i := slices.IndexFunc(spec.Metrics, func(sm otelMetric) bool { return sm.Name == name })
		if i < 0 {
			t.Errorf("metric %q is not in otel.json", name)
			continue
		}
		sm := spec.Metrics[i]
		used["metric:"+name] = true
		if m.Unit != sm.Unit {
			t.Errorf("metric %s: unit %q, otel.json says %q", name, m.Unit, sm.Unit)
		}
		var points []attribute.Set
		switch data := m.Data.(type) {
		case metricdata.Sum[int64]:
			if sm.Kind != "counter" || !data.IsMonotonic {
				t.Errorf("metric %s is a counter, otel.json says a %s", name, sm.Kind)
			}
			for _, p := range data.DataPoints {
				points = append(points, p.Attributes)
			}
		case metricdata.Histogram[float64]:
			if sm.Kind != "histogram" {
				t.Errorf("metric %s is a histogram, otel.json says a %s", name, sm.Kind)
			}
			for _, p := range data.DataPoints {
				points = append(points, p.Attributes)
			}
		default:
			t.Errorf("metric %s is %T", name, m.Data)
		}
		for _, p := range points {
			for _, kv := range p.ToSlice() {
				if !slices.Contains(sm.Attributes, string(kv.Key)) {
					t.Errorf("metric %s: attribute %q is not in otel.json's list %v", name, kv.Key, sm.Attributes)
				}
				used["metric "+name+" attribute:"+string(kv.Key)] = true
			}
		}
	}
}

// fleetReasonSays checks a policyd.fleet.reason that names the breaker.
func fleetReasonSays(s string) func(any) bool {
	return func(v any) bool { r, ok := v.(string); return ok && strings.Contains(r, s) }
}

// parkedAtLeast checks a policyd.parked_ms of at least ms.
func parkedAtLeast(ms int64) func(any) bool {
	return func(v any) bool { n, ok := v.(int64); return ok && n >= ms }
}

func TestOTel(t *testing.T) {
	spec := readOTelSpec(t)
	used := map[string]bool{}
	record := func(t *testing.T, rec *otelRecorder, span tracetest.SpanStub) map[string]metricdata.Metrics {
		t.Helper()
		ms := rec.metrics(t)
		usedNames(t, spec, span, ms, used)
		return ms
	}

	t.Run("a call that fails once and succeeds", func(t *testing.T) {
		rec := newOTelRecorder(t)
		var decided decisions
		c := newClient(t, daemonAddr(t), policyd.WithClock(newFakeClock()), policyd.WithFleetGate(false), decided.option())
		srv := newFlaky(t, step{status: 503, body: overloadedBody}, step{status: 200})
		span := rec.span(t, func(ctx context.Context) {
			if err := c.Do(ctx, openai, chat(srv.URL)); err != nil {
				t.Fatalf("Do: %v", err)
			}
		})
		ds := decided.get()
		if len(ds) != 1 || ds[0].Action != policyd.ActionRetry || ds[0].FailOpen {
			t.Fatalf("decisions %+v, want policyd's one RETRY", ds)
		}
		wantEvent(t, span, map[string]any{"policyd.attempt": int64(1), "error.type": "OVERLOADED", "policyd.action": "RETRY",
			"policyd.delay_ms": ds[0].Delay.Milliseconds(), "policyd.decided_by": "policyd"})
		wantResends(t, span, 1)
		wantRetryAndWait(t, record(t, rec, span), "OVERLOADED", "retry", ds[0].Delay.Seconds())
	})

	t.Run("a stop", func(t *testing.T) {
		rec := newOTelRecorder(t)
		c := newClient(t, daemonAddr(t), policyd.WithFleetGate(false))
		srv := newFlaky(t, step{status: 401, body: badKeyBody})
		span := rec.span(t, func(ctx context.Context) {
			if err := c.Do(ctx, openai, chat(srv.URL)); err == nil {
				t.Fatal("Do succeeded, want the 401's stop")
			}
		})
		wantEvent(t, span, map[string]any{"policyd.attempt": int64(1), "error.type": "AUTH_INVALID", "policyd.action": "STOP",
			"policyd.stop_reason": "NOT_RETRYABLE", "policyd.decided_by": "policyd"})
		wantResends(t, span, 0)
		if ms := record(t, rec, span); len(retriesOf(t, ms)) != 0 || len(waitsOf(t, ms)) != 0 {
			t.Errorf("metrics %v, want no retry and no wait", ms)
		}
	})

	t.Run("a fail-open decision, policyd down", func(t *testing.T) {
		rec := newOTelRecorder(t)
		c := newClient(t, closedAddr(t), policyd.WithClock(newFakeClock()), policyd.WithRand(fixedRand(0.1)))
		srv := newFlaky(t, step{status: 503, body: overloadedBody}, step{status: 200})
		span := rec.span(t, func(ctx context.Context) {
			if err := c.Do(ctx, openai, chat(srv.URL)); err != nil {
				t.Fatalf("Do: %v", err)
			}
		})
		// 1 s × the draw 0.1: the fail-open policy's first delay.
		wantEvent(t, span, map[string]any{"policyd.attempt": int64(1), "error.type": "OVERLOADED", "policyd.action": "RETRY",
			"policyd.delay_ms": int64(100), "policyd.decided_by": "fail_open"})
		wantResends(t, span, 1)
		wantRetryAndWait(t, record(t, rec, span), "OVERLOADED", "retry", 0.1)
	})

	t.Run("a gate stop and a gate fallback", func(t *testing.T) {
		rec := newOTelRecorder(t)
		d := gateDaemon(t, breakerPolicy)
		c := newClient(t, d.addr, policyd.WithParkLimit(0)) // parking off: the gate stops at once
		subscribe(t, c, gpt4o)
		openBreaker(t, d.addr, c)
		var op countingOp
		span := rec.span(t, func(ctx context.Context) {
			if err := c.Do(ctx, gpt4o, op.fn); !errors.Is(err, policyd.ErrNotAdmitted) {
				t.Fatalf("Do = %v, want the gate's stop", err)
			}
		})
		wantEvent(t, span, map[string]any{"policyd.attempt": int64(0), "policyd.action": "STOP", "policyd.stop_reason": "CIRCUIT_OPEN",
			"policyd.decided_by": "gate", "policyd.fleet.reason": fleetReasonSays("breaker open")})
		wantResends(t, span, 0)
		record(t, rec, span)

		call := gpt4o
		call.Fallback = func(_ context.Context, call policyd.Call, fb policyd.Fallback) (policyd.Call, error) {
			call.Model = fb.Model
			return call, nil
		}
		span = rec.span(t, func(ctx context.Context) {
			if err := c.Do(ctx, call, op.fn); err != nil {
				t.Fatalf("Do with a fallback: %v", err)
			}
		})
		wantEvent(t, span, map[string]any{"policyd.attempt": int64(0), "policyd.action": "FALL_BACK", "policyd.stop_reason": "CIRCUIT_OPEN",
			"policyd.fallback.target": "openai/gpt-4o-mini", "policyd.decided_by": "gate",
			"policyd.fleet.reason": fleetReasonSays("breaker open")})
		if ms := record(t, rec, span); len(retriesOf(t, ms)) != 0 || len(waitsOf(t, ms)) != 0 {
			t.Errorf("metrics %v, want no retry and no wait", ms)
		}
	})

	t.Run("a park released", func(t *testing.T) {
		rec := newOTelRecorder(t)
		// The breaker probes 2 s after it opens: the parked call is its probe.
		d := gateDaemon(t, "fleet:\n  breaker: {min_volume: 3, min_clients: 1, open_for: 2s, max_open_for: 2s, probe_interval: 200ms}\n")
		var decided decisions
		c := newClient(t, d.addr, decided.option())
		subscribe(t, c, gpt4o)
		openBreaker(t, d.addr, c)
		call := gpt4o
		call.Timeout = 20 * time.Second
		var op countingOp
		span := rec.span(t, func(ctx context.Context) {
			if err := c.Do(ctx, call, op.fn); err != nil || op.runs.Load() != 1 {
				t.Fatalf("Do = %v after %d runs, want the parked call to go once the breaker probes", err, op.runs.Load())
			}
		})
		ds := decided.get()
		if len(ds) != 2 || !ds[0].Parked || ds[0].Waited != 0 || !ds[1].Parked || ds[1].Waited < 500*time.Millisecond {
			t.Fatalf("decisions %+v, want the park and its release", ds)
		}
		// The release is the decision (the park's start is the hook's alone).
		want := map[string]any{"policyd.attempt": int64(0), "policyd.action": "RETRY", "policyd.delay_ms": ds[1].Delay.Milliseconds(),
			"policyd.decided_by": "gate", "policyd.parked_ms": parkedAtLeast(500)}
		if ds[1].Fleet.Reason != "" {
			want["policyd.fleet.reason"] = ds[1].Fleet.Reason
		}
		got := wantEvent(t, span, want)
		if got["policyd.parked_ms"] != ds[1].Waited.Milliseconds() {
			t.Errorf("policyd.parked_ms %v, the hook saw %v", got["policyd.parked_ms"], ds[1].Waited)
		}
		wantResends(t, span, 0)
		ms := record(t, rec, span)
		if len(retriesOf(t, ms)) != 0 {
			t.Errorf("retries %v, want none", retriesOf(t, ms))
		}
		waits := waitsOf(t, ms)
		if len(waits) != 1 || waits[0].Count != 1 || waits[0].Sum != ds[1].Waited.Seconds() {
			t.Errorf("waits %+v, want one park of %v", waits, ds[1].Waited)
		}
	})

	if t.Failed() {
		return
	}
	// Every name of otel.json is used by some case above: the file and
	// the client cannot drift apart either way.
	want := map[string]bool{"event:" + spec.SpanEvent.Name: true}
	for k := range spec.SpanEvent.Attributes {
		want["event attribute:"+k] = true
	}
	for k := range spec.SpanAttributes {
		want["span attribute:"+k] = true
	}
	for _, m := range spec.Metrics {
		want["metric:"+m.Name] = true
		for _, a := range m.Attributes {
			want["metric "+m.Name+" attribute:"+a] = true
		}
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if !used[k] {
			t.Errorf("otel.json's %s: no case records it", k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(used)) {
		if !want[k] {
			t.Errorf("%s is recorded but not in otel.json", k)
		}
	}
}
