package policyd

import (
	"strconv"
	"strings"
	"time"

	policydv1 "github.com/policyd/policyd/clients/go/internal/gen/policyd/v1"
)

// Classification is what policyd makes of a failure.
type Classification struct {
	// FailureType is the kind of failure.
	FailureType FailureType
	// Retryable is whether another attempt can succeed.
	Retryable bool
	// Rule is the id of the classification rule that decided, e.g.
	// "auth.invalid"; fail-open rules start with "fail_open.".
	Rule string
	// Reason says why the rule decided so.
	Reason string
	// RecoveryAction says what the user or the model should do; short and
	// deterministic, e.g. "Fix the API credentials (key, token or
	// endpoint), then run again."
	RecoveryAction string
	// RetryAfter is the server's delay hint; 0 when it gave none.
	RetryAfter time.Duration
	// ContinuationPrompt is, for FailureTypeInvalidStream, the prompt that
	// continues the response (e.g. "Please continue.").
	ContinuationPrompt string
}

// Decision is what to do after a failed attempt: policyd's answer to
// NextDelay, or the fail-open policy's when policyd could not be asked
// (FailOpen).
type Decision struct {
	// Action is what to do next.
	Action Action
	// Delay is how long to wait before the next attempt (ActionRetry).
	Delay time.Duration

	// Classification is what the failure is.
	Classification

	// AttemptsLeft is how many attempts are still allowed after this one.
	AttemptsLeft int
	// StopReason says why not to retry (ActionStop, and ActionFallBack when
	// retrying ended).
	StopReason StopReason
	// StopText is the reason in a sentence.
	StopText string
	// Fallback is what to fall back to (ActionFallBack).
	Fallback FallbackKind
	// FallbackReason says why to fall back.
	FallbackReason string
	// FallbackProvider and FallbackModel name the target from policyd's
	// fallback chains (ActionFallBack), empty when the policy names none.
	FallbackProvider, FallbackModel string

	// Fleet is what policyd's fleet memory knew and did, nil when the
	// failure's bucket had no state.
	Fleet *FleetState

	// Parked is set on the decisions of a call the fleet gate parks
	// before its first attempt (attempt 0 in the decision hook): when it
	// parks (StopText "waiting for the fleet: breaker open on
	// openai/gpt-4o, ~4 s", Delay the fleet's estimate of the wait, 0 when
	// unknown), and when it leaves the park (Waited says how long it was
	// parked; Action RETRY: the attempt goes).
	Parked bool
	// Waited is how long a parked call waited (Parked).
	Waited time.Duration

	// Strategy names the strategy applied, "<profile>/<FAILURE_TYPE>", e.g.
	// "default/RATE_LIMIT" ("fail-open/..." for the fail-open policy).
	Strategy string
	// StrategySummary renders it in one line, e.g. "exponential 1s→1m0s ×2,
	// full jitter, 5 attempts".
	StrategySummary string
	// Journaled is whether policyd recorded the attempt in its journal.
	Journaled bool
	// FailOpen is true when the client decided with its FailOpenPolicy
	// because policyd was unreachable or too slow.
	FailOpen bool
}

// why is the decision's reason for not retrying, in a sentence.
func (d Decision) why() string {
	var b strings.Builder
	switch {
	case d.StopText != "":
		b.WriteString(d.StopText)
	case d.FallbackReason != "":
		b.WriteString(d.FallbackReason)
	case d.Reason != "":
		b.WriteString(d.Reason)
	default:
		b.WriteString(strings.ToLower(d.Action.String()))
	}
	if d.RecoveryAction != "" && !strings.Contains(b.String(), d.RecoveryAction) {
		b.WriteString("; ")
		b.WriteString(d.RecoveryAction)
	}
	b.WriteString(" [")
	b.WriteString(d.FailureType.String())
	if d.Rule != "" {
		b.WriteString(", rule ")
		b.WriteString(d.Rule)
	}
	if d.FailOpen {
		b.WriteString(", fail-open")
	}
	b.WriteString("]")
	return b.String()
}

// decisionFromProto converts policyd's answer.
func decisionFromProto(pd *policydv1.Decision) Decision {
	d := Decision{
		Action:          Action(pd.GetAction()),
		Delay:           pd.GetDelay().AsDuration(),
		Classification:  classificationFromProto(pd.GetClassification()),
		AttemptsLeft:    int(pd.GetAttemptsLeft()),
		StopReason:      StopReason(pd.GetStopReason()),
		StopText:        pd.GetStopText(),
		Fallback:        FallbackKind(pd.GetFallback().GetKind()),
		FallbackReason:  pd.GetFallback().GetReason(),
		Strategy:        pd.GetStrategy().GetName(),
		StrategySummary: pd.GetStrategy().GetSummary(),
		Journaled:       pd.GetJournaled(),

		FallbackProvider: pd.GetFallback().GetProvider(),
		FallbackModel:    pd.GetFallback().GetModel(),
	}
	if fs := pd.GetFleet(); fs != nil {
		d.Fleet = &FleetState{
			Bucket: fs.GetBucket(), Breaker: enumName(policydv1.BreakerState_name, int32(fs.GetBreaker()), "BREAKER_STATE_"),
			HoldRemaining: fs.GetHoldRemaining().AsDuration(), OpenRemaining: fs.GetOpenRemaining().AsDuration(),
			BudgetTokens: fs.GetBudgetTokens(), BudgetExhausted: fs.GetBudgetExhausted(),
			Stopped: fs.GetStopped(), Changed: fs.GetChanged(), Reason: fs.GetReason(),
		}
	}
	return d
}

// FleetState is what policyd's fleet memory knows about a failure's bucket:
// the failures of every agent on the same provider, model and key.
type FleetState struct {
	// Bucket names it, e.g. "availability:openai/gpt-4o".
	Bucket string
	// Breaker is "CLOSED", "OPEN" or "HALF_OPEN".
	Breaker string
	// HoldRemaining is the shared cooldown left; OpenRemaining how much
	// longer the breaker stays open or the key stopped.
	HoldRemaining, OpenRemaining time.Duration
	// BudgetTokens is the retry budget left; BudgetExhausted says it is spent.
	BudgetTokens    float64
	BudgetExhausted bool
	// Stopped: another agent's failure stopped this key.
	Stopped bool
	// Changed: the fleet changed this decision (a longer wait, a stop or a
	// fallback).
	Changed bool
	// Reason says why, for a human.
	Reason string
}

func classificationFromProto(cls *policydv1.Classification) Classification {
	c := Classification{
		FailureType:        FailureType(cls.GetFailureType()),
		Retryable:          cls.GetRetryable(),
		Rule:               cls.GetRule(),
		Reason:             cls.GetReason(),
		RecoveryAction:     cls.GetRecoveryAction(),
		ContinuationPrompt: cls.GetContinuationPrompt(),
	}
	if ra := cls.GetRetryAfter(); ra != nil {
		c.RetryAfter = ra.AsDuration()
	}
	return c
}

// proto renders a client-side (fail-open) decision for RecordAttempt.
func (d Decision) proto() *policydv1.Decision {
	pd := &policydv1.Decision{
		Action: policydv1.Action(d.Action),
		Classification: &policydv1.Classification{
			FailureType: policydv1.FailureType(d.FailureType), Retryable: d.Retryable, Rule: d.Rule,
			Reason: d.Reason, RecoveryAction: d.RecoveryAction,
		},
		AttemptsLeft: int32(d.AttemptsLeft),
		StopReason:   policydv1.StopReason(d.StopReason),
		StopText:     d.StopText,
		Strategy:     &policydv1.AppliedStrategy{Name: d.Strategy, Summary: d.StrategySummary},
	}
	if d.Action == ActionRetry {
		pd.Delay = durationProto(d.Delay)
	}
	if d.Fallback != FallbackNone {
		pd.Fallback = &policydv1.Fallback{Kind: policydv1.FallbackKind(d.Fallback), Reason: d.FallbackReason}
	}
	return pd
}

// Action is what to do after a failed attempt.
type Action int32

// The actions, numbered as in policyd.v1.Action.
const (
	ActionUnspecified Action = 0
	// ActionRetry: wait Decision.Delay, then try again.
	ActionRetry Action = 1
	// ActionStop: give up and surface the failure.
	ActionStop Action = 2
	// ActionFallBack: try something else; Decision.Fallback says what.
	ActionFallBack Action = 3
)

// String returns "RETRY", "STOP", "FALL_BACK" or "UNSPECIFIED".
func (a Action) String() string { return enumName(policydv1.Action_name, int32(a), "ACTION_") }

// StopReason says why the answer is not to retry.
type StopReason int32

// The stop reasons, numbered as in policyd.v1.StopReason.
const (
	StopReasonUnspecified StopReason = 0
	// StopNotRetryable: the failure type is not retried.
	StopNotRetryable StopReason = 1
	// StopAttemptsExhausted: the attempt budget is spent.
	StopAttemptsExhausted StopReason = 2
	// StopDeadline: waiting would pass the caller's deadline or the time budget.
	StopDeadline StopReason = 3
	// StopServerDelayAboveCeiling: the server asked for a longer wait than the ceiling.
	StopServerDelayAboveCeiling StopReason = 4
	// StopIrreversibleOperation: the operation is not safe to repeat.
	StopIrreversibleOperation StopReason = 5
	// StopContinuationOff: an invalid stream was already continued, or continuing is off.
	StopContinuationOff StopReason = 6
	// StopStreamPhase: the profile does not retry failures in this stream phase.
	StopStreamPhase StopReason = 7
	// StopCircuitOpen: the fleet's circuit breaker for this provider and model is open.
	StopCircuitOpen StopReason = 8
	// StopRetryBudgetExhausted: the fleet's retry budget for this provider and model is spent.
	StopRetryBudgetExhausted StopReason = 9
	// StopFleetStop: another agent's failure stopped every agent on this key.
	StopFleetStop StopReason = 10
	// StopFleetShed: the fleet gate shed the first attempt (the fleet admits
	// only part of the first attempts to the target for now).
	StopFleetShed StopReason = 11
)

// String returns the reason's name, e.g. "NOT_RETRYABLE".
func (r StopReason) String() string {
	return enumName(policydv1.StopReason_name, int32(r), "STOP_REASON_")
}

// FallbackKind is what to fall back to.
type FallbackKind int32

// The fallback kinds, numbered as in policyd.v1.FallbackKind.
const (
	FallbackNone FallbackKind = 0
	// FallbackLargerContextModel: a model of the same family with a larger context window.
	FallbackLargerContextModel FallbackKind = 1
	// FallbackOtherProvider: another provider.
	FallbackOtherProvider FallbackKind = 2
	// FallbackOtherModel: another model of the same provider.
	FallbackOtherModel FallbackKind = 3
)

// String returns the kind's name, e.g. "OTHER_PROVIDER".
func (k FallbackKind) String() string {
	return enumName(policydv1.FallbackKind_name, int32(k), "FALLBACK_KIND_")
}

// Safety is whether an operation may be repeated. Unspecified lets policyd
// derive it from the operation and method: model calls and GET, HEAD,
// OPTIONS are safe, other methods and shell, exec, deploy operations are
// irreversible.
type Safety int32

// The safety levels, numbered as in policyd.v1.OperationSafety.
const (
	SafetyUnspecified  Safety = 0
	SafetySafe         Safety = 1
	SafetyConditional  Safety = 2
	SafetyIrreversible Safety = 3
)

// String returns the level's name, e.g. "SAFE".
func (s Safety) String() string {
	return enumName(policydv1.OperationSafety_name, int32(s), "OPERATION_SAFETY_")
}

// FailureType is what kind of failure happened, independent of provider.
type FailureType int32

// The failure types, numbered as in policyd.v1.FailureType.
const (
	FailureTypeUnspecified       FailureType = 0
	FailureTypeRateLimit         FailureType = 1
	FailureTypeQuotaExhausted    FailureType = 2
	FailureTypeOverloaded        FailureType = 3
	FailureTypeServerError       FailureType = 4
	FailureTypeTimeout           FailureType = 5
	FailureTypeConnectionError   FailureType = 6
	FailureTypeStreamInterrupted FailureType = 7
	FailureTypeInvalidStream     FailureType = 8
	FailureTypeAuthInvalid       FailureType = 9
	FailureTypePermissionDenied  FailureType = 10
	FailureTypeContextTooLong    FailureType = 11
	FailureTypeInvalidRequest    FailureType = 12
	FailureTypeContentPolicy     FailureType = 13
	FailureTypeNotFound          FailureType = 14
	FailureTypeUnsupported       FailureType = 15
	FailureTypeCanceled          FailureType = 16
	FailureTypeTaskTransient     FailureType = 17
	FailureTypeTaskFatal         FailureType = 18
	FailureTypeUnknown           FailureType = 19
)

// String returns the type's name, e.g. "RATE_LIMIT".
func (t FailureType) String() string {
	return enumName(policydv1.FailureType_name, int32(t), "FAILURE_TYPE_")
}

// Phase is where in a streaming call a failure happened.
type Phase int32

// The phases, numbered as in policyd.v1.Phase.
const (
	PhaseUnspecified Phase = 0
	// PhaseConnect: before any response arrived.
	PhaseConnect Phase = 1
	// PhaseMidStream: after the stream had started delivering data.
	PhaseMidStream Phase = 2
)

// String returns "CONNECT", "MID_STREAM" or "UNSPECIFIED".
func (p Phase) String() string { return enumName(policydv1.Phase_name, int32(p), "PHASE_") }

func enumName(names map[int32]string, v int32, prefix string) string {
	if n, ok := names[v]; ok {
		return strings.TrimPrefix(n, prefix)
	}
	return "UNKNOWN_" + strings.TrimSuffix(prefix, "_") + "(" + strconv.Itoa(int(v)) + ")"
}
