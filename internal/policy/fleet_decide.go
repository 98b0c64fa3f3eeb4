package policy

import (
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/strategy"
)

// fleetStopReasons maps the fleet's reasons to the API's.
var fleetStopReasons = map[fleet.Reason]policydv1.StopReason{
	fleet.ReasonCircuitOpen:  policydv1.StopReason_STOP_REASON_CIRCUIT_OPEN,
	fleet.ReasonBudget:       policydv1.StopReason_STOP_REASON_RETRY_BUDGET_EXHAUSTED,
	fleet.ReasonStop:         policydv1.StopReason_STOP_REASON_FLEET_STOP,
	fleet.ReasonDeadline:     policydv1.StopReason_STOP_REASON_DEADLINE,
	fleet.ReasonAboveCeiling: policydv1.StopReason_STOP_REASON_SERVER_DELAY_ABOVE_CEILING,
}

// ceilingActions maps a strategy's answer to a hint above its ceiling to
// the fleet's, which a shared cooldown (another agent's hint) meets too.
var ceilingActions = map[strategy.AboveCeiling]fleet.CeilingAction{
	strategy.AboveCeilingStop:    fleet.CeilingStop,
	strategy.AboveCeilingBackoff: fleet.CeilingIgnore,
	strategy.AboveCeilingClamp:   fleet.CeilingClamp,
}

// applyFleet lets fleet memory record the failure and change v: a longer
// wait (a shared cooldown, an open breaker, a paced budget), a stop or a
// fallback. Decision.fleet says what it knew and did.
func (p *Policy) applyFleet(v *verdict, c Call, f *policydv1.Failure, t policydv1.FailureType,
	cls *policydv1.Classification, strat strategy.Strategy, prof *Profile, in strategy.Input, out strategy.Decision) {
	hasChain := len(p.Chains.Errors[chainKey(f.GetProvider(), f.GetModel())]) > 0
	ask := fleet.Ask{
		Target:       fleet.Target{Tenant: c.Tenant, Provider: f.GetProvider(), Model: f.GetModel(), KeyID: f.GetKeyId()},
		ClientID:     c.ClientID,
		Origin:       c.Origin,
		HoldCeiling:  holdCeiling(in, strat),
		FailureType:  t,
		Attempt:      in.Attempt,
		Recovery:     cls.GetRecoveryAction(),
		Retry:        v.action == policydv1.Action_ACTION_RETRY,
		Delay:        out.Delay,
		CanFallBack:  strat.Fallback != strategy.FallbackNone || hasChain,
		MaxWait:      maxWait(in, strat),
		Switches:     prof.Fleet,
		AboveCeiling: ceilingActions[strat.AboveCeiling],
		// A 429 carries the provider's limit too: pacing starts at once.
	}
	lim := fleet.ReadLimits(f.GetProvider(), f.GetHeaders(), in.Now)
	ask.RequestsPerMinute, ask.InputTokensPerMinute, ask.Left = lim.RequestsPerMinute, lim.InputTokensPerMinute, lim.Left
	ask.OutputTokensPerMinute = lim.OutputTokensPerMinute
	if in.HasRetryAfter && in.RetryAfter > 0 {
		ask.RetryAfter = in.RetryAfter
	}
	if strat.HonorRetryAfter {
		ask.HintCeiling = underCap(in, strat.RetryAfterCeiling)
	}
	ans := c.Fleet.Decide(ask)
	v.fleet = ans.State
	if !ask.Retry {
		return
	}
	if ans.Retry {
		v.delay = ans.Delay
		return
	}
	v.delay = 0
	v.stopReason, v.stopText = fleetStopReasons[ans.Reason], ans.Why
	v.action = policydv1.Action_ACTION_STOP
	if ans.Reason != fleet.ReasonDeadline && ask.CanFallBack {
		kind := fallbackProto(strat.Fallback)
		if kind == policydv1.FallbackKind_FALLBACK_KIND_UNSPECIFIED {
			kind = policydv1.FallbackKind_FALLBACK_KIND_OTHER_PROVIDER
		}
		v.action = policydv1.Action_ACTION_FALL_BACK
		v.fallback = &policydv1.Fallback{Kind: kind, Reason: ans.Why}
	}
}

// holdCeiling is the longest the profile would wait on a server's hint:
// its Retry-After ceiling (its backoff cap when it ignores hints), under
// the operator's cap; 0 for no limit.
func holdCeiling(in strategy.Input, s strategy.Strategy) time.Duration {
	if s.HonorRetryAfter {
		return underCap(in, s.RetryAfterCeiling)
	}
	return underCap(in, s.MaxDelay)
}

// underCap is limit (0: none) under the operator's cap on any delay.
func underCap(in strategy.Input, limit time.Duration) time.Duration {
	if in.MaxDelayCap > 0 && (limit == 0 || in.MaxDelayCap < limit) {
		return in.MaxDelayCap
	}
	return limit
}

// maxWait is the longest wait within the deadline, the time budget and the
// longest wait the strategy accepts (its hint ceiling or backoff cap,
// whichever is longer; the operator's cap over both), as fleet.Ask wants
// it: 0 for no limit, negative when no wait fits.
func maxWait(in strategy.Input, s strategy.Strategy) time.Duration {
	limit := underCap(in, max(s.RetryAfterCeiling, s.MaxDelay))
	tighten := func(d time.Duration) {
		if d <= 0 {
			d = -1
		}
		if limit == 0 || d < limit {
			limit = d
		}
	}
	if !in.Deadline.IsZero() {
		tighten(in.Deadline.Sub(in.Now))
	}
	if in.Budget > 0 {
		tighten(in.Budget - in.Elapsed)
	}
	return limit
}

func fleetStateProto(s *fleet.State) *policydv1.FleetState {
	if s == nil {
		return nil
	}
	out := &policydv1.FleetState{
		Bucket:          s.Bucket,
		Breaker:         BreakerStateProto(s.Breaker),
		BudgetTokens:    s.Tokens,
		BudgetExhausted: s.BudgetExhausted,
		Changed:         s.Changed,
		Reason:          s.Reason,
		Stopped:         s.Stopped,
	}
	if s.HoldLeft > 0 {
		out.HoldRemaining = durationpb.New(s.HoldLeft)
	}
	if s.OpenLeft > 0 {
		out.OpenRemaining = durationpb.New(s.OpenLeft)
	}
	return out
}

// BreakerStateProto is the API's value for the breaker state s, by their
// shared name ("half_open" is BREAKER_STATE_HALF_OPEN).
func BreakerStateProto(s fleet.BreakerState) policydv1.BreakerState {
	return byName[policydv1.BreakerState](s)
}

// FleetStateProto renders a bucket's state for the API.
func FleetStateProto(s fleet.State) *policydv1.FleetState { return fleetStateProto(&s) }

// chainEndings: stop reasons after which a configured fallback chain is
// used: retrying ended for a reason another provider or model escapes.
var chainEndings = map[policydv1.StopReason]bool{
	policydv1.StopReason_STOP_REASON_ATTEMPTS_EXHAUSTED:         true,
	policydv1.StopReason_STOP_REASON_SERVER_DELAY_ABOVE_CEILING: true,
	policydv1.StopReason_STOP_REASON_CIRCUIT_OPEN:               true,
	policydv1.StopReason_STOP_REASON_RETRY_BUDGET_EXHAUSTED:     true,
	policydv1.StopReason_STOP_REASON_FLEET_STOP:                 true,
}

// chainTypes: failure types not retried that another provider or model can
// still serve (another key, another context window, another filter).
var chainTypes = map[policydv1.FailureType]bool{
	policydv1.FailureType_FAILURE_TYPE_QUOTA_EXHAUSTED:   true,
	policydv1.FailureType_FAILURE_TYPE_AUTH_INVALID:      true,
	policydv1.FailureType_FAILURE_TYPE_PERMISSION_DENIED: true,
	policydv1.FailureType_FAILURE_TYPE_CONTEXT_TOO_LONG:  true,
	policydv1.FailureType_FAILURE_TYPE_CONTENT_POLICY:    true,
}

// applyChain names the next target from the policy file's fallback chains
// when v falls back, or stops where a chain can take over; targets whose
// breaker is open or whose key is stopped are skipped.
func (p *Policy) applyChain(v *verdict, c Call, f *policydv1.Failure, t policydv1.FailureType, strat strategy.Strategy) {
	if f == nil || v.action == policydv1.Action_ACTION_RETRY {
		return
	}
	chains, kind := p.Chains.Errors, policydv1.FallbackKind_FALLBACK_KIND_UNSPECIFIED
	switch t {
	case policydv1.FailureType_FAILURE_TYPE_CONTEXT_TOO_LONG:
		chains, kind = p.Chains.ContextWindow, policydv1.FallbackKind_FALLBACK_KIND_LARGER_CONTEXT_MODEL
	case policydv1.FailureType_FAILURE_TYPE_CONTENT_POLICY:
		chains = p.Chains.ContentPolicy
	}
	chain := chains[chainKey(f.GetProvider(), f.GetModel())]
	if len(chain) == 0 {
		return
	}
	eligible := v.action == policydv1.Action_ACTION_FALL_BACK || chainEndings[v.stopReason] ||
		(v.stopReason == policydv1.StopReason_STOP_REASON_NOT_RETRYABLE && chainTypes[t])
	if !eligible {
		return
	}
	var skipped []string
	for _, target := range chain {
		if c.Fleet != nil {
			if ok, why := c.Fleet.Available(fleet.Target{Tenant: c.Tenant, Provider: target.Provider, Model: target.Model, KeyID: target.KeyID}); !ok {
				skipped = append(skipped, fmt.Sprintf("%s (%s)", target, why))
				continue
			}
		}
		k := kind
		if k == policydv1.FallbackKind_FALLBACK_KIND_UNSPECIFIED {
			k = policydv1.FallbackKind_FALLBACK_KIND_OTHER_MODEL
			if !strings.EqualFold(target.Provider, f.GetProvider()) {
				k = policydv1.FallbackKind_FALLBACK_KIND_OTHER_PROVIDER
			}
		}
		reason := v.stopText
		if reason == "" && v.fallback != nil {
			reason = v.fallback.GetReason()
		}
		reason = strings.TrimSuffix(reason, "; fall back to "+strat.Fallback.String())
		reason += "; fall back to " + target.String()
		if len(skipped) > 0 {
			reason += ", skipping " + strings.Join(skipped, ", ")
		}
		v.action, v.delay = policydv1.Action_ACTION_FALL_BACK, 0
		v.fallback = &policydv1.Fallback{Kind: k, Reason: reason, Provider: target.Provider, Model: target.Model}
		return
	}
	// Every target is unavailable: nothing to fall back to.
	v.action, v.fallback = policydv1.Action_ACTION_STOP, nil
	if v.stopReason == policydv1.StopReason_STOP_REASON_UNSPECIFIED {
		v.stopReason = policydv1.StopReason_STOP_REASON_CIRCUIT_OPEN
	}
	v.stopText = strings.TrimSpace(v.stopText + "; every fallback target is unavailable: " + strings.Join(skipped, ", "))
}
