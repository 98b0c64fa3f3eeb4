package server

import (
	"context"
	"errors"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/auth"
	"github.com/policyd/policyd/internal/enums"
	"github.com/policyd/policyd/internal/journal"
)

// ErrJournalOff is every journal RPC's answer when the daemon runs without a
// database; toStatus turns it into codes.FailedPrecondition.
var ErrJournalOff = errors.New("the journal is off: start policyd serve with --database-url URL (or DATABASE_URL) to record RetryContexts")

// DefaultJournalTimeout bounds how long NextDelay waits for its attempt to be
// committed before answering journaled=false: long enough for a batched
// commit under load, short enough that a slow database never slows retries.
const DefaultJournalTimeout = 250 * time.Millisecond

// JournalServer implements policydv1.JournalServiceServer on a journal
// store, classifying recorded failures with the PolicyServer's policy.
type JournalServer struct {
	policydv1.UnimplementedJournalServiceServer

	store    *journal.Store // nil: the journal is off
	policies *PolicyServer
}

// NewJournalServer returns a JournalServer; store nil means the journal is
// off and every RPC answers ErrJournalOff.
func NewJournalServer(store *journal.Store, policies *PolicyServer) *JournalServer {
	return &JournalServer{store: store, policies: policies}
}

// tenantOf is the caller's tenant, as authentication put it into ctx.
// Without authentication every caller is the empty tenant. Every journal
// call is scoped by it: another tenant's context is NotFound.
func tenantOf(ctx context.Context) string { return auth.TenantFrom(ctx) }

func (s *JournalServer) on() error {
	if s.store == nil {
		return ErrJournalOff
	}
	return nil
}

// BeginContext starts a context, idempotently when the client supplies its id.
func (s *JournalServer) BeginContext(ctx context.Context, req *policydv1.BeginContextRequest) (*policydv1.BeginContextResponse, error) {
	if err := s.on(); err != nil {
		return nil, err
	}
	if err := validateContextID(req.GetContextId(), false); err != nil {
		return nil, err
	}
	if req.GetProfile() != "" {
		if err := validateProfileIn(s.policies.policy.Load(), req.GetProfile()); err != nil {
			return nil, err
		}
	}
	c, created, err := s.store.BeginContext(ctx, journal.Context{
		ID: req.GetContextId(), Tenant: tenantOf(ctx), Agent: req.GetAgent(), Provider: req.GetProvider(),
		Model: req.GetModel(), Operation: req.GetOperation(), Profile: req.GetProfile(), Labels: req.GetLabels(),
	})
	if err != nil {
		return nil, err
	}
	return &policydv1.BeginContextResponse{Context: contextProto(c), Created: created}, nil
}

// RecordAttempt classifies the failure and records the attempt (and the
// decision, when given), returning after the commit.
func (s *JournalServer) RecordAttempt(ctx context.Context, req *policydv1.RecordAttemptRequest) (*policydv1.RecordAttemptResponse, error) {
	if err := s.on(); err != nil {
		return nil, err
	}
	if err := validateContextID(req.GetContextId(), true); err != nil {
		return nil, err
	}
	if req.GetAttempt() < 1 || req.GetAttempt() > maxAttempt {
		return nil, fieldErrorf("attempt", "must be 1..%d, got %d", maxAttempt, req.GetAttempt())
	}
	if req.GetFailure() == nil {
		return nil, fieldErrorf("failure", "required")
	}
	if err := validateFailure(req.GetFailure()); err != nil {
		return nil, err
	}
	if err := validateDuration("duration", req.GetDuration()); err != nil {
		return nil, err
	}
	p := s.policies.policy.Load()
	profile := req.GetProfile()
	if profile != "" {
		if err := validateProfileIn(p, profile); err != nil {
			return nil, err
		}
	}
	cls := p.Classifier.Classify(req.GetFailure(), req.GetOptions(), profile)
	a := attemptOf(req.GetContextId(), int(req.GetAttempt()), req.GetFailure(), cls, req.GetDecision(), req.GetDuration().AsDuration())
	created, err := s.store.Record(ctx, tenantOf(ctx), a, ensureOf(req.GetFailure(), profile))
	if err != nil {
		return nil, err
	}
	return &policydv1.RecordAttemptResponse{Created: created, Classification: cls}, nil
}

// FinishContext ends a context; a failed one gets its error report.
func (s *JournalServer) FinishContext(ctx context.Context, req *policydv1.FinishContextRequest) (*policydv1.FinishContextResponse, error) {
	if err := s.on(); err != nil {
		return nil, err
	}
	if err := validateContextID(req.GetContextId(), true); err != nil {
		return nil, err
	}
	outcome, ok := outcomes[req.GetOutcome()]
	if !ok || outcome == journal.OutcomeInProgress {
		return nil, fieldErrorf("outcome", "must be OUTCOME_RESOLVED, OUTCOME_FAILED or OUTCOME_ABANDONED, got %v", req.GetOutcome())
	}
	c, report, err := s.store.FinishContext(ctx, tenantOf(ctx), req.GetContextId(), outcome)
	if err != nil {
		return nil, err
	}
	resp := &policydv1.FinishContextResponse{Context: contextProto(c)}
	if report != nil {
		resp.Report = reportProto(*report)
	}
	return resp, nil
}

// GetContext returns a context with its attempts.
func (s *JournalServer) GetContext(ctx context.Context, req *policydv1.GetContextRequest) (*policydv1.GetContextResponse, error) {
	if err := s.on(); err != nil {
		return nil, err
	}
	if err := validateContextID(req.GetContextId(), true); err != nil {
		return nil, err
	}
	c, attempts, err := s.store.GetContext(ctx, tenantOf(ctx), req.GetContextId())
	if err != nil {
		return nil, err
	}
	resp := &policydv1.GetContextResponse{Context: contextProto(c)}
	for _, a := range attempts {
		resp.Attempts = append(resp.Attempts, attemptProto(a))
	}
	return resp, nil
}

// GetErrorReport returns a failed context's report.
func (s *JournalServer) GetErrorReport(ctx context.Context, req *policydv1.GetErrorReportRequest) (*policydv1.GetErrorReportResponse, error) {
	if err := s.on(); err != nil {
		return nil, err
	}
	if err := validateContextID(req.GetContextId(), true); err != nil {
		return nil, err
	}
	r, err := s.store.GetErrorReport(ctx, tenantOf(ctx), req.GetContextId())
	if err != nil {
		return nil, err
	}
	return &policydv1.GetErrorReportResponse{Report: reportProto(r)}, nil
}

// ListContexts lists contexts, newest first.
func (s *JournalServer) ListContexts(ctx context.Context, req *policydv1.ListContextsRequest) (*policydv1.ListContextsResponse, error) {
	if err := s.on(); err != nil {
		return nil, err
	}
	f := journal.Filter{Provider: req.GetProvider(), PageSize: int(req.GetPageSize()), PageToken: req.GetPageToken()}
	if req.GetOutcome() != policydv1.Outcome_OUTCOME_UNSPECIFIED {
		o, ok := outcomes[req.GetOutcome()]
		if !ok {
			return nil, fieldErrorf("outcome", "unknown value %d", req.GetOutcome())
		}
		f.Outcome = o
	}
	if t := req.GetFailureType(); t != policydv1.FailureType_FAILURE_TYPE_UNSPECIFIED {
		if _, ok := policydv1.FailureType_name[int32(t)]; !ok {
			return nil, fieldErrorf("failure_type", "unknown value %d", t)
		}
		f.FailureType = failureTypeName(t)
	}
	if req.GetPageSize() < 0 {
		return nil, fieldErrorf("page_size", "must not be negative, got %d", req.GetPageSize())
	}
	for _, ts := range []struct {
		field string
		v     *timestamppb.Timestamp
		dst   *time.Time
	}{{"started_after", req.GetStartedAfter(), &f.From}, {"started_before", req.GetStartedBefore(), &f.To}} {
		if ts.v == nil {
			continue
		}
		if err := ts.v.CheckValid(); err != nil {
			return nil, fieldErrorf(ts.field, "%v", err)
		}
		*ts.dst = ts.v.AsTime()
	}
	contexts, next, err := s.store.ListContexts(ctx, tenantOf(ctx), f)
	if err != nil {
		return nil, err
	}
	resp := &policydv1.ListContextsResponse{NextPageToken: next}
	for _, c := range contexts {
		resp.Contexts = append(resp.Contexts, contextProto(c))
	}
	return resp, nil
}

// journalDecision records the attempt NextDelay just decided, when the
// request names a context and the journal is on and healthy, waiting at most
// the journal timeout. It reports whether the attempt is committed; a
// dropped one is not an error: the client can RecordAttempt again later
// (idempotent).
func (s *PolicyServer) journalDecision(ctx context.Context, req *policydv1.NextDelayRequest, d *policydv1.Decision) JournalResult {
	if s.journal == nil || req.GetContextId() == "" {
		return JournalNotAsked
	}
	if !s.journal.Healthy() {
		return JournalDropped
	}
	ctx, cancel := context.WithTimeout(ctx, s.journalTimeout)
	defer cancel()
	a := attemptOf(req.GetContextId(), int(req.GetAttempt()), req.GetFailure(), d.GetClassification(), d, 0)
	if _, err := s.journal.Record(ctx, tenantOf(ctx), a, ensureOf(req.GetFailure(), req.GetProfile())); err != nil {
		return JournalDropped
	}
	return JournalCommitted
}

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

// validateDuration checks an optional duration: valid, non-negative, at most 30 days.
func validateDuration(field string, d *durationpb.Duration) error {
	if d == nil {
		return nil
	}
	if err := d.CheckValid(); err != nil {
		return fieldErrorf(field, "invalid duration: %v", err)
	}
	if v := d.AsDuration(); v < 0 || v > maxElapsed {
		return fieldErrorf(field, "must be within 0..30 days, got %v", v)
	}
	return nil
}
