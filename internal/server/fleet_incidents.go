package server

import (
	"context"
	"errors"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/enums"
	"github.com/policyd/policyd/internal/journal"
	"github.com/policyd/policyd/internal/validate"
)

// FleetOption configures a FleetServer.
type FleetOption func(*FleetServer)

// WithIncidentJournal reads incidents (ListIncidents, GetIncident) from
// store; nil, or without this option, they answer ErrJournalOff.
func WithIncidentJournal(store *journal.Store) FleetOption {
	return func(s *FleetServer) { s.journal = store }
}

// ListIncidents lists a page of the caller's incidents, newest first.
func (s *FleetServer) ListIncidents(ctx context.Context, req *policydv1.ListIncidentsRequest) (*policydv1.ListIncidentsResponse, error) {
	if s.journal == nil {
		return nil, ErrJournalOff
	}
	for _, f := range [...]struct{ name, value string }{{"provider", req.GetProvider()}, {"model", req.GetModel()}} {
		if len(f.value) > validate.MaxFieldBytes {
			return nil, validate.Fieldf(f.name, "%d bytes, at most %d allowed", len(f.value), validate.MaxFieldBytes)
		}
	}
	if len(req.GetBucket()) > maxBucketName {
		return nil, validate.Fieldf("bucket", "%d bytes, too long for a bucket name", len(req.GetBucket()))
	}
	if n := req.GetPageSize(); n < 0 || n > journal.MaxPageSize {
		return nil, validate.Fieldf("page_size", "%d is not in [0, %d]", n, journal.MaxPageSize)
	}
	f := journal.IncidentFilter{OpenOnly: req.GetOpenOnly(), Provider: req.GetProvider(), Model: req.GetModel(),
		Bucket: req.GetBucket(), PageSize: int(req.GetPageSize()), PageToken: req.GetPageToken()}
	if since := req.GetSince(); since != nil {
		if err := since.CheckValid(); err != nil {
			return nil, validate.Fieldf("since", "%v", err)
		}
		f.Since = since.AsTime()
	}
	list, next, err := s.journal.ListIncidents(ctx, tenantOf(ctx), f)
	if err != nil {
		return nil, err
	}
	resp := &policydv1.ListIncidentsResponse{NextPageToken: next}
	for _, in := range list {
		resp.Incidents = append(resp.Incidents, incidentProto(in))
	}
	return resp, nil
}

// GetIncident returns one of the caller's incidents with its timeline.
func (s *FleetServer) GetIncident(ctx context.Context, req *policydv1.GetIncidentRequest) (*policydv1.GetIncidentResponse, error) {
	if s.journal == nil {
		return nil, ErrJournalOff
	}
	id := req.GetId()
	if id <= 0 {
		return nil, validate.Fieldf("id", "required: an incident's id as ListIncidents shows it, got %d", id)
	}
	d, err := s.journal.GetIncident(ctx, tenantOf(ctx), id)
	if errors.Is(err, journal.ErrNotFound) {
		return nil, notFoundf("incident %d not found", id)
	}
	if err != nil {
		return nil, err
	}
	resp := &policydv1.GetIncidentResponse{Incident: incidentProto(d.Incident)}
	for _, e := range d.Events {
		resp.Events = append(resp.Events, &policydv1.IncidentEvent{At: timestamppb.New(e.At), Event: e.Event, Reason: e.Reason,
			ClientId: e.ClientID, Identity: e.Identity, Peer: e.Peer, Replica: e.Replica, Counts: e.Counts})
	}
	for _, b := range d.Activity {
		resp.Activity = append(resp.Activity, &policydv1.IncidentActivity{Start: timestamppb.New(b.Start),
			Width: durationpb.New(b.Width), FailedAttempts: b.Failed, RetriesHeld: b.RetriesHeld,
			ResolvedContexts: b.Resolved, FirstAttemptsShed: b.Shed, FirstAttemptsParked: b.Parked, Breaker: breakerStates[b.Breaker]})
	}
	return resp, nil
}

// breakerStates maps the journal's breaker states to the API's; "" (no
// move) is unspecified.
var breakerStates = map[string]policydv1.BreakerState{
	journal.BreakerOpen: policydv1.BreakerState_BREAKER_STATE_OPEN, journal.BreakerHalfOpen: policydv1.BreakerState_BREAKER_STATE_HALF_OPEN,
	journal.BreakerClosed: policydv1.BreakerState_BREAKER_STATE_CLOSED,
}

func incidentProto(in journal.Incident) *policydv1.Incident {
	failureType, _ := enums.Parse[policydv1.FailureType](in.FirstFailureType) // "" or unknown: unspecified
	p := &policydv1.Incident{
		Id: in.ID, Bucket: in.Bucket, Scope: in.Scope, Provider: in.Provider, Model: in.Model, KeyId: in.KeyID,
		StartedAt: timestamppb.New(in.StartedAt), LastEventAt: timestamppb.New(in.LastEventAt), Open: in.Open,
		FirstFailure: &policydv1.IncidentFailure{At: timestamppb.New(in.FirstFailureAt), ClientId: in.FirstClientID,
			FailureType: failureType, Rule: in.FirstFailureRule, ContextId: in.FirstFailureContextID, Agent: in.FirstFailureAgent},
		FirstEvent: in.FirstEvent, FirstReason: in.FirstReason, Breaker: breakerStates[in.BreakerState],
		BreakerOpens: int32(in.BreakerOpens), Holds: int32(in.Holds), Stops: int32(in.Stops),
		BudgetsExhausted: int32(in.BudgetExhausted), Clears: int32(in.Clears), Events: int32(in.Events),
		FirstAttemptsShed: in.Shed, FailedAttempts: in.FailedAttempts, RetriesHeld: in.RetriesHeld,
		RetriesStopped: in.Stopped, RetriesFellBack: in.FellBack, BaselineFailuresPerSecond: in.BaselinePerSecond,
		RetriesAvoided: in.RetriesAvoided, FirstAttemptsParked: in.Parked, FirstAttemptsFellBack: in.GateFellBack,
	}
	if !in.RecoveredAt.IsZero() {
		p.RecoveredAt = timestamppb.New(in.RecoveredAt)
		p.TimeToRecovery = durationpb.New(in.Recovery)
	}
	return p
}
