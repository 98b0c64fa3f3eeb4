package policyd

import (
	"errors"
	"fmt"
	"strings"
)

// Error is what Do returns when it gives up: the last attempt's error, how
// many attempts ran, and the decision that stopped it — or the caller's
// context error when the context ended first. errors.Is and errors.As see
// both the attempt's error and the context's.
type Error struct {
	// Err is the last attempt's error.
	Err error
	// Attempts is how many attempts ran.
	Attempts int
	// Decision is the decision that ended the call; its Action is
	// ActionUnspecified when the caller's context ended it. RecoveryAction
	// says what to do about the failure.
	Decision Decision
	// ContextID is the journal's RetryContext id; empty when not journaled.
	ContextID string
	// authErr is the daemon's UNAUTHENTICATED answer when it stopped the
	// call (errors.Is(err, ErrUnauthenticated); errors.As reaches the
	// *AuthError).
	authErr *AuthError
	// ctxErr is the caller's context error (its cause) when the context
	// ended the call.
	ctxErr error
	// gated: the fleet gate stopped the call before its first attempt
	// (Attempts is 0), or the context ended while it waited out a hold.
	gated bool
}

// ErrNotAdmitted matches (errors.Is) the error of a call the fleet gate
// stopped before its first attempt: the fleet's breaker is open, its key
// stopped, its load shed, its hold longer than the deadline, or policyd
// unreachable for long with this process's own budget spent. The error's
// Decision.StopReason says which, Decision.StopText why.
var ErrNotAdmitted = errors.New("policyd: the fleet gate did not admit the first attempt")

// Error returns the attempt's error followed by why policyd gave up, e.g.
// `POST http://…/v1/chat: HTTP 401 Unauthorized (policyd: stopped after 1
// attempt: not retryable: Fix the API credentials … [AUTH_INVALID, rule
// auth.invalid])`.
func (e *Error) Error() string {
	var b strings.Builder
	if e.Err != nil {
		b.WriteString(e.Err.Error())
		b.WriteString(" ")
	}
	b.WriteString("(policyd: ")
	attempts := fmt.Sprintf("%d attempt", e.Attempts)
	if e.Attempts != 1 {
		attempts += "s"
	}
	switch {
	case e.authErr != nil:
		fmt.Fprintf(&b, "stopped after %s: %s", attempts, strings.TrimPrefix(e.authErr.Error(), "policyd: "))
	case e.gated && e.ctxErr != nil:
		fmt.Fprintf(&b, "gave up waiting out the fleet's hold before the first attempt: %v", e.ctxErr)
	case e.gated:
		fmt.Fprintf(&b, "first attempt not sent: %s: %s [fleet gate]", e.Decision.StopReason, e.Decision.StopText)
	case e.ctxErr != nil:
		fmt.Fprintf(&b, "gave up after %s: %v", attempts, e.ctxErr)
	case e.Decision.Action == ActionFallBack:
		fmt.Fprintf(&b, "fall back to %s after %s: %s", e.Decision.Fallback, attempts, e.Decision.why())
	default:
		fmt.Fprintf(&b, "stopped after %s: %s", attempts, e.Decision.why())
	}
	b.WriteString(")")
	return b.String()
}

// Unwrap returns the attempt's error and, when the context ended the call,
// the context's error, or when the daemon refused the client's credentials,
// the *AuthError.
func (e *Error) Unwrap() []error {
	errs := make([]error, 0, 2)
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	if e.authErr != nil {
		errs = append(errs, e.authErr)
	}
	if e.ctxErr != nil {
		errs = append(errs, e.ctxErr)
	} else if e.gated {
		errs = append(errs, ErrNotAdmitted)
	}
	return errs
}

// RecoveryAction returns what to do about the failure, as policyd said it
// (empty when the caller's context ended the call).
func (e *Error) RecoveryAction() string { return e.Decision.RecoveryAction }
