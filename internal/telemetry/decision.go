package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/enums"
)

// Attributes NextDelay's span carries (UnaryServerInterceptor), with the
// stable name error.type where one exists and the policyd. prefix for the
// rest.
const (
	AttrFailureType = "error.type"
	AttrAction      = "policyd.action"
	AttrDelay       = "policyd.delay_ms"
	AttrStopReason  = "policyd.stop_reason"
	AttrRule        = "policyd.rule"
	AttrAttempt     = "policyd.attempt"
	AttrFleet       = "policyd.fleet.reason"
	AttrJournaled   = "policyd.journaled"
)

// UnaryServerInterceptor puts NextDelay's decision on the call's span (the
// one StatsHandler started): the failure type, the action, the delay, the
// stop reason, the rule that matched, the fleet's reason and whether it
// was journaled. It only reads a span that records, so it costs a type
// switch otherwise. Install it with server.WithMonitoring.
func UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		r, ok := resp.(*policydv1.NextDelayResponse)
		if !ok || err != nil {
			return resp, err
		}
		span := trace.SpanFromContext(ctx)
		if !span.IsRecording() {
			return resp, err
		}
		d := r.GetDecision()
		attrs := []attribute.KeyValue{
			attribute.String(AttrFailureType, enums.Short(d.GetClassification().GetFailureType())),
			attribute.String(AttrAction, enums.Short(d.GetAction())),
			attribute.String(AttrRule, d.GetClassification().GetRule()),
			attribute.Int64(AttrDelay, d.GetDelay().AsDuration().Milliseconds()),
			attribute.Bool(AttrJournaled, d.GetJournaled()),
		}
		if nd, ok := req.(*policydv1.NextDelayRequest); ok {
			attrs = append(attrs, attribute.Int64(AttrAttempt, int64(nd.GetAttempt())))
		}
		if d.GetAction() == policydv1.Action_ACTION_STOP {
			attrs = append(attrs, attribute.String(AttrStopReason, enums.Short(d.GetStopReason())))
		}
		if reason := d.GetFleet().GetReason(); reason != "" {
			attrs = append(attrs, attribute.String(AttrFleet, reason))
		}
		span.SetAttributes(attrs...)
		return resp, err
	}
}
