package cases

import (
	"strings"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/policy"
)

// The short, lower- or upper-case names case files use for the API's enums.

// FailureType reads "RATE_LIMIT" or "FAILURE_TYPE_RATE_LIMIT", as the
// policy file does.
func FailureType(s string) (policydv1.FailureType, bool) { return policy.ParseFailureType(s) }

// Action reads "retry", "stop" or "fall_back".
func Action(s string) (policydv1.Action, bool) {
	v, ok := enumValue(policydv1.Action_value, "ACTION_", s)
	return policydv1.Action(v), ok
}

// StopReason reads e.g. "attempts_exhausted".
func StopReason(s string) (policydv1.StopReason, bool) {
	v, ok := enumValue(policydv1.StopReason_value, "STOP_REASON_", s)
	return policydv1.StopReason(v), ok
}

func enumValue(values map[string]int32, prefix, s string) (int32, bool) {
	name := strings.ToUpper(strings.TrimSpace(s))
	if !strings.HasPrefix(name, prefix) {
		name = prefix + name
	}
	v, ok := values[name]
	return v, ok && v != 0
}

// shortName is an enum value's name without its prefix, lower case for
// actions and stop reasons as case files write them.
func shortName(full, prefix string, lower bool) string {
	s := strings.TrimPrefix(full, prefix)
	if lower {
		s = strings.ToLower(s)
	}
	return s
}
