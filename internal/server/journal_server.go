package server

import (
	"context"
	"errors"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/auth"
	"github.com/policyd/policyd/internal/journal"
	"github.com/policyd/policyd/internal/policy"
	"github.com/policyd/policyd/internal/validate"
)

// ErrJournalOff is every journal RPC's answer when the daemon runs without a
// database; toStatus turns it into codes.FailedPrecondition.
var ErrJournalOff = errors.New("the journal is off: start policyd serve with --database-url URL (or DATABASE_URL) to record RetryContexts")

// DefaultJournalTimeout bounds how long NextDelay waits for its attempt to be
// committed before answering journaled=false: long enough for a batched
// commit under load, short enough that a slow database never slows retries.
const DefaultJournalTimeout = 250 * time.Millisecond

// PolicySource gives the policy in force; *PolicyServer is one, and a
// reload changes what it gives.
type PolicySource interface{ Policy() *policy.Policy }

// JournalServer implements policydv1.JournalServiceServer on a journal
// store, classifying recorded failures with the policy in force.
type JournalServer struct {
	policydv1.UnimplementedJournalServiceServer

	store    *journal.Store // nil: the journal is off
	policies PolicySource
}

// NewJournalServer returns a JournalServer; store nil means the journal is
// off and every RPC answers ErrJournalOff.
func NewJournalServer(store *journal.Store, policies PolicySource) *JournalServer {
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
	if err := validate.ContextID(req.GetContextId(), false); err != nil {
		return nil, err
	}
	if req.GetProfile() != "" {
		if err := validate.ProfileIn(s.policies.Policy(), req.GetProfile()); err != nil {
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
	if err := validate.ContextID(req.GetContextId(), true); err != nil {
		return nil, err
	}
	if req.GetAttempt() < 1 || req.GetAttempt() > validate.MaxAttempt {
		return nil, validate.Fieldf("attempt", "must be 1..%d, got %d", validate.MaxAttempt, req.GetAttempt())
	}
	if req.GetFailure() == nil {
		return nil, validate.Fieldf("failure", "required")
	}
	if err := validate.Failure(req.GetFailure()); err != nil {
		return nil, err
	}
	if err := validateDuration("duration", req.GetDuration()); err != nil {
		return nil, err
	}
	if err := validateDecision(req.GetDecision()); err != nil {
		return nil, err
	}
	p := s.policies.Policy()
	profile := req.GetProfile()
	if profile != "" {
		if err := validate.ProfileIn(p, profile); err != nil {
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
	if err := validate.ContextID(req.GetContextId(), true); err != nil {
		return nil, err
	}
	outcome, ok := outcomes[req.GetOutcome()]
	if !ok || outcome == journal.OutcomeInProgress {
		return nil, validate.Fieldf("outcome", "must be OUTCOME_RESOLVED, OUTCOME_FAILED or OUTCOME_ABANDONED, got %v", req.GetOutcome())
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
	if err := validate.ContextID(req.GetContextId(), true); err != nil {
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
	if err := validate.ContextID(req.GetContextId(), true); err != nil {
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
	if err := validate.Text("provider", req.GetProvider(), validate.MaxLabelBytes); err != nil {
		return nil, err
	}
	f := journal.Filter{Provider: req.GetProvider(), PageSize: int(req.GetPageSize()), PageToken: req.GetPageToken()}
	if req.GetOutcome() != policydv1.Outcome_OUTCOME_UNSPECIFIED {
		o, ok := outcomes[req.GetOutcome()]
		if !ok {
			return nil, validate.Fieldf("outcome", "unknown value %d", req.GetOutcome())
		}
		f.Outcome = o
	}
	if t := req.GetFailureType(); t != policydv1.FailureType_FAILURE_TYPE_UNSPECIFIED {
		if _, ok := policydv1.FailureType_name[int32(t)]; !ok {
			return nil, validate.Fieldf("failure_type", "unknown value %d", t)
		}
		f.FailureType = failureTypeName(t)
	}
	if req.GetPageSize() < 0 {
		return nil, validate.Fieldf("page_size", "must not be negative, got %d", req.GetPageSize())
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
			return nil, validate.Fieldf(ts.field, "%v", err)
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
