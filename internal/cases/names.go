package cases

import (
	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/enums"
)

// The short, lower- or upper-case names case files use for the API's enums
// (internal/enums reads them all).

// FailureType reads "RATE_LIMIT" or "FAILURE_TYPE_RATE_LIMIT", as the
// policy file does.
func FailureType(s string) (policydv1.FailureType, bool) {
	return enums.Parse[policydv1.FailureType](s)
}

// Action reads "retry", "stop" or "fall_back".
func Action(s string) (policydv1.Action, bool) { return enums.Parse[policydv1.Action](s) }

// StopReason reads e.g. "attempts_exhausted".
func StopReason(s string) (policydv1.StopReason, bool) { return enums.Parse[policydv1.StopReason](s) }
