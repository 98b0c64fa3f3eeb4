package policyd

import (
	"cmp"
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
	// refusal is the daemon's answer that stopped the call as a
	// configuration error: an *AuthError (errors.Is(err,
	// ErrUnauthenticated)) or an *OptionsError (errors.Is(err,
	// ErrInvalidOptions)); errors.As reaches either.
	refusal error
	// ctxErr is the caller's context error (its cause) when the context
	// ended the call.
	ctxErr error
	// unfollowed says why a FALL_BACK decision stopped the call instead:
	// no FallbackFunc, or MaxFallbacks used up.
	unfollowed string
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
	case e.refusal != nil:
		fmt.Fprintf(&b, "stopped after %s: %s", attempts, strings.TrimPrefix(e.refusal.Error(), "policyd: "))
	case e.gated && e.ctxErr != nil:
		fmt.Fprintf(&b, "gave up waiting out the fleet's hold before the first attempt: %v", e.ctxErr)
	case e.gated:
		fmt.Fprintf(&b, "first attempt not sent: %s: %s [fleet gate]", e.Decision.StopReason, e.Decision.StopText)
	case e.ctxErr != nil:
		fmt.Fprintf(&b, "gave up after %s: %v", attempts, e.ctxErr)
	case e.Decision.Action == ActionFallBack:
		// Not "fall back to …": the call did not fall back, it stopped.
		why := cmp.Or(e.unfollowed, "the call has no fallback function")
		fmt.Fprintf(&b, "stopped after %s: policyd advised a fallback to %s, and %s: %s",
			attempts, fallbackTarget(e.Decision), why, e.Decision.why())
	default:
		fmt.Fprintf(&b, "stopped after %s: %s", attempts, e.Decision.why())
	}
	b.WriteString(")")
	return b.String()
}

// Unwrap returns the attempt's error and, when the context ended the call,
// the context's error, or when the daemon refused the client's credentials
// or the call's options, the *AuthError or *OptionsError.
func (e *Error) Unwrap() []error {
	errs := make([]error, 0, 2)
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	if e.refusal != nil {
		errs = append(errs, e.refusal)
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

// fallbackTarget names where a FALL_BACK decision pointed: its kind and,
// when the profile's chain names them, the provider and model, e.g.
// "OTHER_PROVIDER (anthropic/claude-haiku-4-5)".
func fallbackTarget(d Decision) string {
	kind := d.Fallback.String()
	switch {
	case d.FallbackProvider != "" && d.FallbackModel != "":
		return kind + " (" + d.FallbackProvider + "/" + d.FallbackModel + ")"
	case d.FallbackProvider != "" || d.FallbackModel != "":
		return kind + " (" + d.FallbackProvider + d.FallbackModel + ")"
	}
	return kind
}
