package policyd

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
)

// OpenTelemetry (docs/clients.md, "Tracing and metrics"; the names are
// clients/testdata/otel.json's): every decision is an event on the
// caller's span, the call's retries an attribute of it, and the retries
// and waits two instruments of the global meter provider. Only the API is
// used: without an SDK the span is not recording and the instruments are
// not enabled, and the client builds no attribute for them. A call that
// succeeds at once touches none of it.

// instrumentationName names the client's meter.
const instrumentationName = "github.com/policyd/policyd/clients/go"

// The names of otel.json.
const (
	eventDecision = "policyd.decision"

	attrAttempt        = "policyd.attempt"
	attrErrorType      = "error.type"
	attrAction         = "policyd.action"
	attrDelayMs        = "policyd.delay_ms"
	attrStopReason     = "policyd.stop_reason"
	attrFleetReason    = "policyd.fleet.reason"
	attrFallbackTarget = "policyd.fallback.target"
	attrParkedMs       = "policyd.parked_ms"
	attrDecidedBy      = "policyd.decided_by"
	attrResendCount    = "http.request.resend_count"

	metricRetries = "policyd.client.retries"
	metricWait    = "policyd.client.wait"
	attrProvider  = "policyd.provider"
	attrModel     = "policyd.model"
	attrWaitKind  = "policyd.wait.kind"
)

// Who decided (policyd.decided_by).
const (
	decidedByPolicyd  = "policyd"
	decidedByFailOpen = "fail_open" // the client's built-in policy, policyd away
	decidedByGate     = "gate"
)

// gateStrategy is the Strategy of the fleet gate's decisions.
const gateStrategy = "fleet-gate"

// waitBuckets are the wait histogram's bounds in seconds: from a jittered
// retry's fraction of a second to the longest park (DefaultParkLimit).
var waitBuckets = []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}

// telemetry holds the client's instruments, made from the global meter
// provider when the client is (one set later still receives them: the
// global provider delegates).
type telemetry struct {
	retries metric.Int64Counter
	wait    metric.Float64Histogram
}

func newTelemetry() telemetry {
	m := otel.GetMeterProvider().Meter(instrumentationName)
	var tm telemetry
	var err error
	if tm.retries, err = m.Int64Counter(metricRetries, metric.WithUnit("{retry}"),
		metric.WithDescription("Retries the client sent.")); err != nil {
		otel.Handle(err)
		tm.retries = noop.Int64Counter{}
	}
	if tm.wait, err = m.Float64Histogram(metricWait, metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(waitBuckets...),
		metric.WithDescription("Time a call waited before an attempt: policyd.wait.kind is retry (a decision's delay) or park (the fleet gate).")); err != nil {
		otel.Handle(err)
		tm.wait = noop.Float64Histogram{}
	}
	return tm
}

// decided records decision d, taken after attempt (0: before the first),
// on ctx's span, and the wait it sets: a RETRY's delay, a park's time.
func (tm telemetry) decided(ctx context.Context, call Call, attempt int, d Decision) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent(eventDecision, trace.WithAttributes(decisionAttributes(attempt, d)...))
	}
	switch {
	case d.Parked:
		tm.waited(ctx, call, "park", d.Waited.Seconds())
	case d.Action == ActionRetry:
		tm.waited(ctx, call, "retry", d.Delay.Seconds())
	}
}

func (tm telemetry) waited(ctx context.Context, call Call, kind string, seconds float64) {
	if tm.wait.Enabled(ctx) {
		tm.wait.Record(ctx, seconds, metric.WithAttributes(targetAttributes(call, attribute.String(attrWaitKind, kind))...))
	}
}

// retried counts a retry sent after a failure of type ft.
func (tm telemetry) retried(ctx context.Context, call Call, ft FailureType) {
	if tm.retries.Enabled(ctx) {
		tm.retries.Add(ctx, 1, metric.WithAttributes(targetAttributes(call, attribute.String(attrErrorType, ft.String()))...))
	}
}

// ended sets the call's retries on ctx's span; a call without any sets
// nothing (the semantic conventions' "only if the request was resent").
func (tm telemetry) ended(ctx context.Context, attempts int) {
	if attempts <= 1 {
		return
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attribute.Int(attrResendCount, attempts-1))
	}
}

// decisionAttributes are the decision event's attributes.
func decisionAttributes(attempt int, d Decision) []attribute.KeyValue {
	by := decidedBy(d)
	attrs := make([]attribute.KeyValue, 0, 9)
	attrs = append(attrs, attribute.Int(attrAttempt, attempt), attribute.String(attrAction, d.Action.String()),
		attribute.String(attrDecidedBy, by))
	if by != decidedByGate {
		attrs = append(attrs, attribute.String(attrErrorType, d.FailureType.String()))
	}
	if d.Action == ActionRetry {
		attrs = append(attrs, attribute.Int64(attrDelayMs, d.Delay.Milliseconds()))
	} else if d.StopReason != StopReasonUnspecified {
		attrs = append(attrs, attribute.String(attrStopReason, d.StopReason.String()))
	}
	if d.Action == ActionFallBack {
		if to := joinNonEmpty(d.FallbackProvider, d.FallbackModel); to != "" {
			attrs = append(attrs, attribute.String(attrFallbackTarget, to))
		}
	}
	if d.Fleet != nil && d.Fleet.Changed && d.Fleet.Reason != "" {
		attrs = append(attrs, attribute.String(attrFleetReason, d.Fleet.Reason))
	}
	if d.Parked {
		attrs = append(attrs, attribute.Int64(attrParkedMs, d.Waited.Milliseconds()))
	}
	return attrs
}

// decidedBy says who took d: the fleet gate, the fail-open policy, or policyd.
func decidedBy(d Decision) string {
	switch {
	case d.Strategy == gateStrategy:
		return decidedByGate
	case d.FailOpen:
		return decidedByFailOpen
	}
	return decidedByPolicyd
}

// targetAttributes are the metrics' attributes: the call's provider and
// model (when it names them) and extra.
func targetAttributes(call Call, extra attribute.KeyValue) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 3)
	attrs = append(attrs, extra)
	if call.Provider != "" {
		attrs = append(attrs, attribute.String(attrProvider, call.Provider))
	}
	if call.Model != "" {
		attrs = append(attrs, attribute.String(attrModel, call.Model))
	}
	return attrs
}

// joinNonEmpty is "a/b", or whichever of a and b is not empty.
func joinNonEmpty(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "/" + b
}
