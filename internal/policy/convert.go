package policy

import (
	"fmt"
	"sort"

	"google.golang.org/protobuf/types/known/durationpb"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/enums"
	"github.com/policyd/policyd/internal/strategy"
)

// byName is the API value a strategy value stands for: the strategy's name
// ("exponential", "at_least", "clamp") is the API value's short name in
// lower case, one spelling for the policy file, the API and the docs.
// TestStrategyEnumsMapByName fails when a value exists on one side only.
func byName[E enums.Enum](v fmt.Stringer) E {
	e, _ := enums.Parse[E](v.String())
	return e
}

// StrategyProto renders a strategy for the API.
func StrategyProto(s strategy.Strategy) *policydv1.Strategy {
	out := &policydv1.Strategy{
		Retry:                  s.Retry,
		MaxAttempts:            int32(s.MaxAttempts),
		Backoff:                byName[policydv1.Backoff](s.Backoff),
		InitialDelay:           durationpb.New(s.InitialDelay),
		Multiplier:             s.Multiplier,
		Jitter:                 byName[policydv1.Jitter](s.Jitter),
		JitterFraction:         s.JitterFraction,
		HonorRetryAfter:        s.HonorRetryAfter,
		RetryAfterMode:         byName[policydv1.RetryAfterMode](s.RetryAfterMode),
		RetryAfterPadding:      s.RetryAfterPadding,
		Fallback:               fallbackProto(s.Fallback),
		FallbackAfter:          int32(s.FallbackAfter),
		RetryAfterJitter:       s.RetryAfterJitter,
		RetryAfterAboveCeiling: byName[policydv1.RetryAfterAboveCeiling](s.AboveCeiling),
	}
	if s.MaxDelay > 0 {
		out.MaxDelay = durationpb.New(s.MaxDelay)
	}
	if s.Step > 0 {
		out.Step = durationpb.New(s.Step)
	}
	if s.RetryAfterCeiling > 0 {
		out.RetryAfterCeiling = durationpb.New(s.RetryAfterCeiling)
	}
	return out
}

// ProfileProto renders a profile for the API, its strategies ordered by failure type.
func ProfileProto(p *Profile) *policydv1.Profile {
	out := &policydv1.Profile{
		Name: p.Name, Description: p.Description, Source: p.Source,
		DefaultStrategy:   StrategyProto(p.Default),
		RetryConnectPhase: p.RetryConnectPhase,
		LearnedFallback:   p.LearnedFallback,
		IdempotentMethods: p.IdempotentMethods,
	}
	if p.Budget > 0 {
		out.Budget = durationpb.New(p.Budget)
	}
	types := make([]policydv1.FailureType, 0, len(p.Strategies))
	for t := range p.Strategies {
		types = append(types, t)
	}
	sort.Slice(types, func(i, j int) bool { return types[i] < types[j] })
	for _, t := range types {
		s := p.Strategies[t]
		out.Strategies = append(out.Strategies, &policydv1.ProfileStrategy{FailureType: t, Strategy: StrategyProto(s), Summary: s.String()})
	}
	return out
}

func actionProto(a strategy.Action) policydv1.Action {
	switch a {
	case strategy.ActionRetry:
		return policydv1.Action_ACTION_RETRY
	case strategy.ActionFallBack:
		return policydv1.Action_ACTION_FALL_BACK
	}
	return policydv1.Action_ACTION_STOP
}

func stopReasonProto(r strategy.StopReason) policydv1.StopReason {
	switch r {
	case strategy.StopNotRetryable:
		return policydv1.StopReason_STOP_REASON_NOT_RETRYABLE
	case strategy.StopAttemptsExhausted:
		return policydv1.StopReason_STOP_REASON_ATTEMPTS_EXHAUSTED
	case strategy.StopDeadline:
		return policydv1.StopReason_STOP_REASON_DEADLINE
	case strategy.StopHintAboveCeiling:
		return policydv1.StopReason_STOP_REASON_SERVER_DELAY_ABOVE_CEILING
	case strategy.StopIrreversible:
		return policydv1.StopReason_STOP_REASON_IRREVERSIBLE_OPERATION
	}
	return policydv1.StopReason_STOP_REASON_UNSPECIFIED
}

func fallbackProto(f strategy.FallbackKind) policydv1.FallbackKind {
	if f == strategy.FallbackNone {
		return policydv1.FallbackKind_FALLBACK_KIND_UNSPECIFIED
	}
	return byName[policydv1.FallbackKind](f)
}
