package server

import (
	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/policy"
	"github.com/policyd/policyd/internal/validate"
)

// Request validation lives in internal/validate, which the offline CLI
// shares; these are the server's names for it.

// FieldError is a request field that failed validation; toStatus makes it
// INVALID_ARGUMENT naming the field.
type FieldError = validate.FieldError

const (
	maxAttempt      = validate.MaxAttempt
	maxElapsed      = validate.MaxElapsed
	maxFieldBytes   = validate.MaxFieldBytes
	maxMessageBytes = validate.MaxMessageBytes
)

// ValidateClassifyRequest is validate.ClassifyRequest.
func ValidateClassifyRequest(req *policydv1.ClassifyRequest) error {
	return validate.ClassifyRequest(req)
}

// ValidateNextDelayRequest is validate.NextDelayRequest.
func ValidateNextDelayRequest(req *policydv1.NextDelayRequest, p *policy.Policy) error {
	return validate.NextDelayRequest(req, p)
}

func fieldErrorf(field, format string, args ...any) *FieldError {
	return validate.Fieldf(field, format, args...)
}

func validateName(field, name string) error                 { return validate.Name(field, name) }
func validateContextID(id string, required bool) error      { return validate.ContextID(id, required) }
func validateProfileIn(p *policy.Policy, name string) error { return validate.ProfileIn(p, name) }
func truncate(s string, n int) string                       { return validate.Truncate(s, n) }
func validateFailure(f *policydv1.Failure) error            { return validate.Failure(f) }
