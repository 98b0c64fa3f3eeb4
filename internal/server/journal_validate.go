package server

import (
	"google.golang.org/protobuf/types/known/durationpb"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/validate"
)

// validateDuration checks an optional duration: valid, non-negative, at most 30 days.
func validateDuration(field string, d *durationpb.Duration) error {
	if d == nil {
		return nil
	}
	if err := d.CheckValid(); err != nil {
		return validate.Fieldf(field, "invalid duration: %v", err)
	}
	if v := d.AsDuration(); v < 0 || v > validate.MaxElapsed {
		return validate.Fieldf(field, "must be within 0..30 days, got %v", v)
	}
	return nil
}

// validateDecision checks a recorded decision's enums: a value the API
// does not define would be stored as a number no post-mortem can read.
func validateDecision(d *policydv1.Decision) error {
	if d == nil {
		return nil
	}
	for _, e := range [...]struct {
		field string
		ok    bool
		n     int32
	}{
		{"decision.action", policydv1.Action_name[int32(d.GetAction())] != "", int32(d.GetAction())},
		{"decision.stop_reason", policydv1.StopReason_name[int32(d.GetStopReason())] != "", int32(d.GetStopReason())},
		{"decision.fallback.kind", policydv1.FallbackKind_name[int32(d.GetFallback().GetKind())] != "", int32(d.GetFallback().GetKind())},
		{"decision.safety", policydv1.OperationSafety_name[int32(d.GetSafety())] != "", int32(d.GetSafety())},
	} {
		if !e.ok {
			return validate.Fieldf(e.field, "unknown value %d", e.n)
		}
	}
	return validateDuration("decision.delay", d.GetDelay())
}
