package policy

import (
	"strings"
	"testing"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/enums"
	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/strategy"
)

// mapsByName checks that strategy's values (parsed from every API short
// name, lower case) and the API's non-zero values correspond one to one.
func mapsByName[E enums.Enum, S interface {
	comparable
	String() string
}](t *testing.T, parse func(string) (S, error), extra ...S) {
	t.Helper()
	seen := map[S]bool{}
	for _, name := range enums.Names[E]() {
		s, err := parse(strings.ToLower(name))
		if err != nil {
			t.Errorf("the API's %s has no strategy value: %v", name, err)
			continue
		}
		if got := byName[E](s); enums.Short(got) != name {
			t.Errorf("strategy %v maps to %v, want %s", s, got, name)
		}
		seen[s] = true
	}
	// Every strategy value the parser knows must have been reached.
	for _, s := range extra {
		if !seen[s] {
			t.Errorf("strategy value %v has no API value", s)
		}
	}
}

func TestStrategyEnumsMapByName(t *testing.T) {
	mapsByName[policydv1.Backoff](t, strategy.ParseBackoff, strategy.BackoffExponential, strategy.BackoffLinear, strategy.BackoffConstant)
	mapsByName[policydv1.Jitter](t, strategy.ParseJitter, strategy.JitterNone, strategy.JitterFull, strategy.JitterEqual,
		strategy.JitterDecorrelated, strategy.JitterProportional, strategy.JitterDown)
	mapsByName[policydv1.RetryAfterMode](t, strategy.ParseRetryAfterMode, strategy.RetryAfterOverride, strategy.RetryAfterAtLeast)
	mapsByName[policydv1.RetryAfterAboveCeiling](t, strategy.ParseAboveCeiling, strategy.AboveCeilingStop,
		strategy.AboveCeilingBackoff, strategy.AboveCeilingClamp)
	mapsByName[policydv1.FallbackKind](t, strategy.ParseFallback, strategy.FallbackLargerContextModel,
		strategy.FallbackOtherProvider, strategy.FallbackOtherModel)
	for s, want := range map[fleet.BreakerState]policydv1.BreakerState{fleet.Closed: policydv1.BreakerState_BREAKER_STATE_CLOSED,
		fleet.Open: policydv1.BreakerState_BREAKER_STATE_OPEN, fleet.HalfOpen: policydv1.BreakerState_BREAKER_STATE_HALF_OPEN} {
		if got := BreakerStateProto(s); got != want {
			t.Errorf("breaker state %v maps to %v, want %v", s, got, want)
		}
	}
	if fallbackProto(strategy.FallbackNone) != policydv1.FallbackKind_FALLBACK_KIND_UNSPECIFIED {
		t.Error("no fallback is not UNSPECIFIED")
	}
}

// Every strategy stop reason and action has an API value of its own.
func TestStopReasonsAndActionsMap(t *testing.T) {
	seen := map[policydv1.StopReason]bool{}
	for r := strategy.StopNotRetryable; r <= strategy.StopIrreversible; r++ {
		p := stopReasonProto(r)
		if p == policydv1.StopReason_STOP_REASON_UNSPECIFIED || seen[p] {
			t.Errorf("strategy stop reason %d maps to %v", r, p)
		}
		seen[p] = true
	}
	if stopReasonProto(strategy.StopNone) != policydv1.StopReason_STOP_REASON_UNSPECIFIED {
		t.Error("StopNone is not UNSPECIFIED")
	}
	for a, want := range map[strategy.Action]policydv1.Action{strategy.ActionRetry: policydv1.Action_ACTION_RETRY,
		strategy.ActionStop: policydv1.Action_ACTION_STOP, strategy.ActionFallBack: policydv1.Action_ACTION_FALL_BACK} {
		if got := actionProto(a); got != want {
			t.Errorf("action %d maps to %v, want %v", a, got, want)
		}
	}
}
