package server

import (
	"context"
	"errors"

	"google.golang.org/protobuf/types/known/durationpb"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/auth"
	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/journal"
	"github.com/policyd/policyd/internal/policy"
	"github.com/policyd/policyd/internal/validate"
)

// FleetServer implements policydv1.FleetServiceServer: what fleet memory
// knows, per bucket of the caller's tenant.
type FleetServer struct {
	policydv1.UnimplementedFleetServiceServer
	fleet    *fleet.Fleet    // nil: fleet memory is off
	policies PolicySource    // the fallback chains and profiles Coordinate reads; may be nil
	drain    <-chan struct{} // closed at shutdown: Coordinate streams end (nil: never)
	admins   Admins          // who may call ClearBucket
	journal  *journal.Store  // where incidents are read; nil: the journal is off
}

// NewFleetServer serves f, which may be nil (every RPC on the fleet's
// memory then says how to turn it on), with the policy policies gives.
func NewFleetServer(f *fleet.Fleet, policies PolicySource, opts ...FleetOption) *FleetServer {
	s := &FleetServer{fleet: f, policies: policies}
	for _, o := range opts {
		o(s)
	}
	return s
}

// ErrFleetOff answers FleetService calls when fleet memory is off;
// toStatus turns it into codes.FailedPrecondition.
var ErrFleetOff = errors.New("fleet memory is off: start policyd serve without --fleet=off")

func (s *FleetServer) on() error {
	if s.fleet == nil {
		return ErrFleetOff
	}
	return nil
}

// ListBuckets lists a page of the caller's buckets, sorted by name: the
// page token is the previous page's last bucket name.
func (s *FleetServer) ListBuckets(ctx context.Context, req *policydv1.ListBucketsRequest) (*policydv1.ListBucketsResponse, error) {
	if err := s.on(); err != nil {
		return nil, err
	}
	for _, f := range [...]struct{ name, value string }{{"provider", req.GetProvider()}, {"model", req.GetModel()}} {
		if len(f.value) > validate.MaxFieldBytes {
			return nil, validate.Fieldf(f.name, "%d bytes, at most %d allowed", len(f.value), validate.MaxFieldBytes)
		}
	}
	if n := req.GetPageSize(); n < 0 || n > fleet.MaxPageSize {
		return nil, validate.Fieldf("page_size", "%d is not in [0, %d]", n, fleet.MaxPageSize)
	}
	if len(req.GetPageToken()) > maxBucketName {
		return nil, validate.Fieldf("page_token", "%d bytes, not a token ListBuckets gave", len(req.GetPageToken()))
	}
	page, next := s.fleet.Buckets(auth.TenantFrom(ctx), req.GetProvider(), req.GetModel(), int(req.GetPageSize()), req.GetPageToken())
	resp := &policydv1.ListBucketsResponse{NextPageToken: next}
	for _, v := range page {
		resp.Buckets = append(resp.Buckets, bucketProto(v))
	}
	return resp, nil
}

// GetBucket returns one bucket by the name decisions show.
func (s *FleetServer) GetBucket(ctx context.Context, req *policydv1.GetBucketRequest) (*policydv1.GetBucketResponse, error) {
	if err := s.on(); err != nil {
		return nil, err
	}
	name := req.GetBucket()
	if err := validBucketName(name); err != nil {
		return nil, err
	}
	v, ok := s.fleet.Bucket(auth.TenantFrom(ctx), name)
	if !ok {
		return nil, notFoundf("bucket %q: the fleet has no state for it (no failure seen, or idle and forgotten)", name)
	}
	return &policydv1.GetBucketResponse{Bucket: bucketProto(v)}, nil
}

// maxBucketName is the longest bucket name: a scope, a provider, a model
// and a key id.
const maxBucketName = 4 * validate.MaxFieldBytes

// validBucketName checks a request's bucket name.
func validBucketName(name string) error {
	if name == "" {
		return validate.Fieldf("bucket", "required (a name as Decision.fleet.bucket shows it, e.g. availability:openai/gpt-4o)")
	}
	if len(name) > maxBucketName {
		return validate.Fieldf("bucket", "%d bytes, too long for a bucket name", len(name))
	}
	return nil
}

func bucketProto(v fleet.BucketView) *policydv1.Bucket {
	return &policydv1.Bucket{
		State:                 policy.FleetStateProto(v.State),
		Scope:                 v.Key.Scope.String(),
		Provider:              v.Key.Provider,
		Model:                 v.Key.Model,
		KeyId:                 v.Key.KeyID,
		WindowFailures:        int32(v.WindowFailures),
		WindowClients:         int32(v.WindowClients),
		OpenPeriod:            durationpb.New(v.OpenPeriod),
		DecisionsChanged:      v.Changed,
		FirstClientId:         v.FirstClient,
		StreamingClients:      int32(v.StreamingClients),
		Reports:               v.Reports,
		AssignmentsSent:       v.Assignments,
		FirstAttemptsAdmitted: v.Admitted,
		FirstAttemptsShed:     v.Shed,
		Successes:             v.Successes,
		AdmitFraction:         v.AdmitFraction,
		RequestsPerMinute:     v.RequestsPerMinute,
		InputTokensPerMinute:  v.InputTokensPerMinute,
		Limits:                limitsProto(v.Limits),
		Idle:                  durationpb.New(v.Idle),
	}
}

// limitsProto renders a bucket's provider limits.
func limitsProto(ls []fleet.LimitView) []*policydv1.ProviderLimit {
	var out []*policydv1.ProviderLimit
	for _, l := range ls {
		pl := &policydv1.ProviderLimit{Name: l.Name, PerMinute: l.PerMinute, Pacing: l.Pacing, Remaining: l.Remaining}
		if l.Remaining >= 0 {
			pl.Seen = durationpb.New(l.Seen)
		}
		if l.ResetIn > 0 {
			pl.ResetIn = durationpb.New(l.ResetIn)
		}
		out = append(out, pl)
	}
	return out
}
