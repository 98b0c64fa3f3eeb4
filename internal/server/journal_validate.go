package server

import (
	"google.golang.org/protobuf/types/known/durationpb"

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
