package policyd

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrInvalidOptions is matched (errors.Is) by the error of a call whose
// own options the daemon refused as INVALID_ARGUMENT: an unknown profile,
// a ContextID that is not a UUID, too many labels. Like a refused token it
// is a configuration error, not an outage, so the client does not fail
// open on it (which would hide it behind retries that look fine and a
// journal that stays empty): Do stops and returns it, Classify returns it.
var ErrInvalidOptions = errors.New("policyd: the daemon refused the call's options")

// OptionsError is the daemon's INVALID_ARGUMENT answer to a call's own
// options; its message names the field, e.g. `profile: unknown profile
// "web_fech"; known: agent_cli, default, task_runner, web_fetch`.
type OptionsError struct {
	// Method is the RPC the daemon refused, e.g. "NextDelay".
	Method string
	// Err is the gRPC status error the daemon answered.
	Err error
}

func (e *OptionsError) Error() string {
	return fmt.Sprintf("policyd: %s: INVALID_ARGUMENT: %s", e.Method, status.Convert(e.Err).Message())
}

// Unwrap returns ErrInvalidOptions and the status error.
func (e *OptionsError) Unwrap() []error { return []error{ErrInvalidOptions, e.Err} }

// refusal is the configuration error in the daemon's answer to method, or
// nil: UNAUTHENTICATED (an *AuthError), or INVALID_ARGUMENT naming one of
// the call's own options (an *OptionsError; see callerMistake).
func (c *Client) refusal(method string, err error) error {
	if aerr := c.authError(method, err); aerr != nil {
		return aerr
	}
	if st, ok := status.FromError(err); ok && callerMistake(st.Code(), st.Message()) {
		return &OptionsError{Method: method, Err: err}
	}
	return nil
}

// callerMistake reports whether a daemon's answer is a mistake in the
// caller's configuration, which every client raises instead of failing
// open (clients/testdata/refusals.json): UNAUTHENTICATED, and
// INVALID_ARGUMENT naming any field but one the client mapped from the
// attempt's error. The daemon's message starts with the field's path
// ("profile: …", "failure.headers: …"); the failure's provider, model,
// operation, method and key id come from the caller, its other fields from
// the error, whose odd value is no reason to stop retrying.
func callerMistake(code codes.Code, msg string) bool {
	switch code {
	case codes.Unauthenticated:
		return true
	case codes.InvalidArgument:
	default:
		return false
	}
	field, _, ok := strings.Cut(msg, ": ")
	if !ok || (field != "failure" && !strings.HasPrefix(field, "failure.")) {
		return true
	}
	switch field {
	case "failure.provider", "failure.model", "failure.operation", "failure.method", "failure.key_id":
		return true
	}
	return false
}
