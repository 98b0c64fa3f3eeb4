// Package validate checks API requests against policyd's limits and names
// the first field that fails, for the gRPC server and the offline CLI alike:
// both accept exactly the same input.
package validate

import (
	"fmt"
	"strconv"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/classifier"
)

// Request limits. They bound what one request can make the server hold and
// scan; each is far above what a real failure carries.
const (
	// MaxHeaders is how many response headers a failure may carry.
	MaxHeaders = 100
	// MaxHeaderNameBytes bounds a header name; real names are short.
	MaxHeaderNameBytes = 256
	// MaxFieldBytes bounds a header value, each cause field and the short
	// failure fields (provider, model, error_name, ...). The classifier reads
	// at most 8 KiB of any one message.
	MaxFieldBytes = 8 << 10
	// MaxMessageBytes bounds failure.message.
	MaxMessageBytes = 64 << 10
	// MaxProfileLen bounds a profile name.
	MaxProfileLen = 64
)

// FieldError is a request field that failed validation. Field is the
// field's proto path, e.g. "failure.causes[3].code" or "failure.http_status".
type FieldError struct {
	Field       string
	Description string
}

// Error returns "field: description", e.g. "failure: required".
func (e *FieldError) Error() string { return e.Field + ": " + e.Description }

func Fieldf(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Description: fmt.Sprintf(format, args...)}
}

// ClassifyRequest checks req against policyd's request limits and
// returns the first violation as a *FieldError, or nil. The server and the
// offline `policyd classify` both apply it, so they accept the same input.
//
//   - failure is required;
//   - failure.http_status is 0 (no HTTP response) or 100..999;
//   - failure.grpc_code is 0..16 (a google.golang.org/grpc/codes value);
//   - failure.phase is a known Phase value;
//   - failure.headers has at most 100 entries, names of at most 256 bytes
//     and values of at most 8 KiB;
//   - failure.causes has at most classifier.MaxCauses (64) links, each field
//     at most 8 KiB;
//   - failure.message is at most 64 KiB; provider, model, operation, method,
//     error_name and error_code at most 8 KiB each;
//   - failure.body is not limited here: a body longer than
//     classifier.MaxBodyBytes (64 KiB) is accepted and truncated, only its
//     first 64 KiB are read (the gRPC message size limit still applies);
//   - profile is empty (meaning "default") or at most 64 characters of
//     [a-z0-9_.-].
func ClassifyRequest(req *policydv1.ClassifyRequest) error {
	if req.GetFailure() == nil {
		return Fieldf("failure", "required")
	}
	if err := Failure(req.GetFailure()); err != nil {
		return err
	}
	return Name("profile", req.GetProfile())
}

// Failure checks a failure against the limits ClassifyRequest
// lists; field paths start with "failure.".
func Failure(f *policydv1.Failure) error {
	if s := f.GetHttpStatus(); s != 0 && (s < 100 || s > 999) {
		return Fieldf("failure.http_status", "must be 0 or 100..999, got %d", s)
	}
	if c := f.GetGrpcCode(); c < 0 || c > 16 {
		return Fieldf("failure.grpc_code", "must be 0..16, got %d", c)
	}
	if p := f.GetPhase(); policydv1.Phase_name[int32(p)] == "" {
		return Fieldf("failure.phase", "unknown value %d", p)
	}
	if n := len(f.GetHeaders()); n > MaxHeaders {
		return Fieldf("failure.headers", "%d entries, at most %d allowed", n, MaxHeaders)
	}
	for name, value := range f.GetHeaders() {
		if len(name) > MaxHeaderNameBytes {
			return Fieldf("failure.headers", "a header name is %d bytes, at most %d allowed", len(name), MaxHeaderNameBytes)
		}
		if len(value) > MaxFieldBytes {
			return Fieldf("failure.headers["+strconv.Quote(name)+"]", "value is %d bytes, at most %d allowed", len(value), MaxFieldBytes)
		}
	}
	if n := len(f.GetCauses()); n > classifier.MaxCauses {
		return Fieldf("failure.causes", "%d links, at most %d allowed", n, classifier.MaxCauses)
	}
	for i, c := range f.GetCauses() {
		for _, fv := range [...]struct{ name, value string }{
			{"name", c.GetName()}, {"code", c.GetCode()}, {"message", c.GetMessage()},
		} {
			if len(fv.value) > MaxFieldBytes {
				return Fieldf(fmt.Sprintf("failure.causes[%d].%s", i, fv.name), "%d bytes, at most %d allowed", len(fv.value), MaxFieldBytes)
			}
		}
	}
	if n := len(f.GetKeyId()); n > MaxLabelBytes {
		return Fieldf("failure.key_id", "%d bytes, at most %d allowed (a label or hash of the key, never the key)", n, MaxLabelBytes)
	}
	if n := len(f.GetMessage()); n > MaxMessageBytes {
		return Fieldf("failure.message", "%d bytes, at most %d allowed", n, MaxMessageBytes)
	}
	for _, fv := range [...]struct{ name, value string }{
		{"provider", f.GetProvider()}, {"model", f.GetModel()}, {"operation", f.GetOperation()},
		{"method", f.GetMethod()}, {"error_name", f.GetErrorName()}, {"error_code", f.GetErrorCode()},
	} {
		if len(fv.value) > MaxFieldBytes {
			return Fieldf("failure."+fv.name, "%d bytes, at most %d allowed", len(fv.value), MaxFieldBytes)
		}
	}
	// failure.body: deliberately unchecked; see ClassifyRequest.
	return nil
}

// Text checks a free-text filter in field: at most max bytes, and no NUL
// or other control character (PostgreSQL's text refuses NUL; the others
// match nothing a client stored).
func Text(field, v string, max int) error {
	if len(v) > max {
		return Fieldf(field, "%d bytes, at most %d allowed", len(v), max)
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f {
			return Fieldf(field, "contains the control character %U", r)
		}
	}
	return nil
}

// Name checks that the profile name p in field is at most 64
// characters of [a-z0-9_.-]; empty passes.
func Name(field, p string) error {
	if len(p) > MaxProfileLen {
		return Fieldf(field, "%d characters, at most %d allowed", len(p), MaxProfileLen)
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return Fieldf(field, "must use only [a-z0-9_.-], got %q", p)
		}
	}
	return nil
}
