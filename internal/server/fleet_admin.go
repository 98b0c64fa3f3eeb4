package server

import (
	"context"
	"errors"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/auth"
	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/validate"
)

// ErrNotAdmin answers an admin call from a caller that is not an admin;
// toStatus turns it into codes.PermissionDenied.
var ErrNotAdmin = errors.New("this call is for admins: start policyd serve with --admin-tenants naming the caller's tenant")

// Admins says who may call the admin RPCs (FleetService.ClearBucket):
// callers whose authenticated tenant is listed. A daemon without
// authentication trusts every caller with them, as with every other call
// (it listens where only its operators reach).
type Admins struct {
	// Authenticated: the daemon authenticates its callers.
	Authenticated bool
	Tenants       map[string]bool
}

func (a Admins) allowed(ctx context.Context) bool {
	return !a.Authenticated || a.Tenants[auth.TenantFrom(ctx)]
}

// SetAdmins sets who may call the admin RPCs (none, by default, once
// the daemon authenticates: Admins{Authenticated: true}).
func (s *FleetServer) SetAdmins(a Admins) { s.admins = a }

// maxClearReason bounds ClearBucketRequest.reason.
const maxClearReason = 256

// ClearBucket clears a bucket's hold, stop, pace or breaker (everything
// when the request names none), for an admin.
func (s *FleetServer) ClearBucket(ctx context.Context, req *policydv1.ClearBucketRequest) (*policydv1.ClearBucketResponse, error) {
	if err := s.on(); err != nil {
		return nil, err
	}
	if !s.admins.allowed(ctx) {
		return nil, ErrNotAdmin
	}
	if err := validBucketName(req.GetBucket()); err != nil {
		return nil, err
	}
	if n := len(req.GetReason()); n > maxClearReason {
		return nil, validate.Fieldf("reason", "%d bytes, at most %d allowed", n, maxClearReason)
	}
	tenant := auth.TenantFrom(ctx)
	if t := req.GetTenant(); t != "" {
		if err := auth.ValidateTenant(t); err != nil {
			return nil, validate.Fieldf("tenant", "%v", err)
		}
		tenant = t
	}
	c := fleet.Clearing{Hold: req.GetHold(), Stop: req.GetStop(), Breaker: req.GetBreaker(), Pace: req.GetPace()}
	v, ok := s.fleet.Clear(tenant, req.GetBucket(), c, origin(ctx), req.GetReason())
	if !ok {
		return nil, notFoundf("bucket %q: the fleet has no state for it (no failure seen, or idle and forgotten)", req.GetBucket())
	}
	return &policydv1.ClearBucketResponse{Bucket: bucketProto(v)}, nil
}
