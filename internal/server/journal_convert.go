package server

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/enums"
	"github.com/policyd/policyd/internal/journal"
)

// Conversion between the API's messages and the journal's records.

// ensureOf is the context a first recorded attempt creates.
func ensureOf(f *policydv1.Failure, profile string) journal.Context {
	return journal.Context{Provider: f.GetProvider(), Model: f.GetModel(), Operation: f.GetOperation(), Profile: profile}
}

// attemptOf is the journal row of one attempt and its decision (d may be nil).
func attemptOf(contextID string, attempt int, f *policydv1.Failure, cls *policydv1.Classification, d *policydv1.Decision, dur time.Duration) journal.Attempt {
	a := journal.Attempt{
		ContextID: contextID, Attempt: attempt, Duration: dur,
		FailureType: failureTypeName(cls.GetFailureType()), Retryable: cls.GetRetryable(), Rule: cls.GetRule(),
		HTTPStatus: int(f.GetHttpStatus()), ErrorName: f.GetErrorName(), ErrorCode: f.GetErrorCode(), Message: f.GetMessage(),
		RecoveryAction: cls.GetRecoveryAction(), Provider: f.GetProvider(), Model: f.GetModel(),
	}
	if a.Message == "" {
		a.Message = f.GetBody() // the journal keeps the first 1 KiB
	}
	if d == nil || d.GetAction() == policydv1.Action_ACTION_UNSPECIFIED {
		return a
	}
	a.Decision = decisionNames[d.GetAction()]
	a.Delay = d.GetDelay().AsDuration()
	a.Strategy = d.GetStrategy().GetName()
	if r := d.GetStopReason(); r != policydv1.StopReason_STOP_REASON_UNSPECIFIED {
		a.StopReason = enums.Short(r)
	}
	if k := d.GetFallback().GetKind(); k != policydv1.FallbackKind_FALLBACK_KIND_UNSPECIFIED {
		a.Fallback = enums.Short(k)
	}
	return a
}

// decisionNames are the journal's names of the actions, built once: the
// map is read on every journaled NextDelay.
var decisionNames = map[policydv1.Action]string{
	policydv1.Action_ACTION_RETRY: journal.DecisionRetry, policydv1.Action_ACTION_STOP: journal.DecisionStop,
	policydv1.Action_ACTION_FALL_BACK: journal.DecisionFallBack,
}

var outcomes = map[policydv1.Outcome]journal.Outcome{
	policydv1.Outcome_OUTCOME_IN_PROGRESS: journal.OutcomeInProgress,
	policydv1.Outcome_OUTCOME_RESOLVED:    journal.OutcomeResolved,
	policydv1.Outcome_OUTCOME_FAILED:      journal.OutcomeFailed,
	policydv1.Outcome_OUTCOME_ABANDONED:   journal.OutcomeAbandoned,
}

func failureTypeName(t policydv1.FailureType) string { return enums.Short(t) }

func failureTypeOf(name string) policydv1.FailureType {
	t, _ := enums.Parse[policydv1.FailureType](name)
	return t
}

func contextProto(c journal.Context) *policydv1.RetryContext {
	out := &policydv1.RetryContext{
		ContextId: c.ID, Agent: c.Agent, Provider: c.Provider, Model: c.Model, Operation: c.Operation,
		Profile: c.Profile, Labels: c.Labels, StartedAt: timestamppb.New(c.StartedAt),
		AttemptCount: int32(c.AttemptCount), TotalWait: durationpb.New(c.TotalWait),
	}
	for po, jo := range outcomes {
		if jo == c.Outcome {
			out.Outcome = po
		}
	}
	if !c.FinishedAt.IsZero() {
		out.FinishedAt = timestamppb.New(c.FinishedAt)
	}
	return out
}

func attemptProto(a journal.Attempt) *policydv1.Attempt {
	out := &policydv1.Attempt{
		Attempt: int32(a.Attempt), At: timestamppb.New(a.At), FailureType: failureTypeOf(a.FailureType),
		Retryable: a.Retryable, Rule: a.Rule, HttpStatus: int32(a.HTTPStatus), ErrorCode: a.ErrorCode,
		Message: a.Message, Strategy: a.Strategy, Provider: a.Provider, Model: a.Model,
	}
	if a.Duration > 0 {
		out.Duration = durationpb.New(a.Duration)
	}
	switch a.Decision {
	case journal.DecisionRetry:
		out.Decision = policydv1.Action_ACTION_RETRY
		out.Delay = durationpb.New(a.Delay)
	case journal.DecisionStop:
		out.Decision = policydv1.Action_ACTION_STOP
	case journal.DecisionFallBack:
		out.Decision = policydv1.Action_ACTION_FALL_BACK
	}
	if a.StopReason != "" {
		out.StopReason, _ = enums.Parse[policydv1.StopReason](a.StopReason)
	}
	if a.Fallback != "" {
		out.Fallback, _ = enums.Parse[policydv1.FallbackKind](a.Fallback)
	}
	return out
}

func reportProto(r journal.Report) *policydv1.ErrorReport {
	out := &policydv1.ErrorReport{
		ContextId: r.ContextID, RootCauseType: failureTypeOf(r.RootCauseType), RootCauseRule: r.RootCauseRule,
		RootCauseMessage: r.RootCauseMessage, RecoveryAction: r.RecoveryAction, Unrecoverable: r.Unrecoverable,
		ManualAction: r.ManualAction, Text: r.Text, CreatedAt: timestamppb.New(r.CreatedAt),
	}
	for _, a := range r.Attempts {
		out.Attempts = append(out.Attempts, attemptProto(a))
	}
	return out
}

// validateContextID checks a context_id: a UUID, or empty when not required.
