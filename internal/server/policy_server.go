package server

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/peer"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/auth"
	"github.com/policyd/policyd/internal/enums"
	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/journal"
	"github.com/policyd/policyd/internal/policy"
	"github.com/policyd/policyd/internal/strategy"
	"github.com/policyd/policyd/internal/validate"
)

// PolicyServer implements policydv1.PolicyServiceServer on a policy. The
// policy sits behind an atomic pointer so that a reload can swap it with
// SetPolicy while requests are in flight: each request uses the policy that
// was current when it started.
type PolicyServer struct {
	policydv1.UnimplementedPolicyServiceServer

	policy atomic.Pointer[policy.Policy]
	now    func() time.Time
	rand   strategy.Rand

	journal        *journal.Store // nil: decisions are not journaled
	journalTimeout time.Duration

	observer DecisionObserver // nil: none

	fleet *fleet.Fleet // nil: every caller is answered as if alone
}

// WithFleet makes NextDelay share each failure with the fleet and answer
// with what the fleet knows (docs/fleet.md). SetPolicy keeps f's settings
// in step with the policy file's fleet section.
func WithFleet(f *fleet.Fleet) Option {
	return func(s *PolicyServer) { s.fleet = f }
}

// Fleet is the server's fleet memory, nil when off.
func (s *PolicyServer) Fleet() *fleet.Fleet { return s.fleet }

// DecisionObserver is told about every decision NextDelay answers, e.g. to
// count them (internal/metrics). Decided runs on the request's goroutine
// before the answer goes out, so it must be cheap and safe for concurrent
// use. profile is the profile that decided (the default one's name when the
// request named none), one of the policy's, so a bounded set.
type DecisionObserver interface {
	Decided(profile string, d *policydv1.Decision, journaled JournalResult)
}

// JournalResult says what became of a decision's journal record.
type JournalResult uint8

const (
	// JournalNotAsked: the request named no context_id, or the journal is
	// off.
	JournalNotAsked JournalResult = iota
	// JournalCommitted: the attempt and decision are committed
	// (Decision.journaled is true).
	JournalCommitted
	// JournalDropped: the request asked for the journal but the attempt was
	// not committed (the database is down, slow or refused it); the client
	// may record it again later.
	JournalDropped
)

// WithDecisionObserver makes o observe every NextDelay decision. Default
// none.
func WithDecisionObserver(o DecisionObserver) Option {
	return func(s *PolicyServer) { s.observer = o }
}

// WithJournal makes NextDelay record the attempt and its decision when the
// request names a context_id, waiting at most timeout (0:
// DefaultJournalTimeout) for the commit.
func WithJournal(store *journal.Store, timeout time.Duration) Option {
	return func(s *PolicyServer) {
		if timeout <= 0 {
			timeout = DefaultJournalTimeout
		}
		s.journal, s.journalTimeout = store, timeout
	}
}

// Option configures a PolicyServer.
type Option func(*PolicyServer)

// WithClock makes now the server's clock (default time.Now), e.g. a fixed
// time under test.
func WithClock(now func() time.Time) Option {
	return func(s *PolicyServer) { s.now = now }
}

// WithRand makes r the jitter source (default SystemRand). r must be safe
// for concurrent use: requests draw from it in parallel.
func WithRand(r strategy.Rand) Option {
	return func(s *PolicyServer) { s.rand = r }
}

// SystemRand is strategy.SystemRand, the daemon's jitter source.
type SystemRand = strategy.SystemRand

// NewPolicyServer returns a PolicyServer that answers with p, which must
// not be nil.
func NewPolicyServer(p *policy.Policy, opts ...Option) *PolicyServer {
	s := &PolicyServer{now: time.Now, rand: SystemRand{}}
	for _, o := range opts {
		o(s)
	}
	s.SetPolicy(p)
	if s.journal != nil {
		// Reports take each type's recovery and manual action from the
		// rules data in force: the journal keeps no copy of the text.
		s.journal.SetTypeText(func(failureType string) journal.TypeText {
			ft, ok := enums.Parse[policydv1.FailureType](failureType)
			if !ok {
				return journal.TypeText{}
			}
			t := s.Policy().Classifier.TypeText(ft)
			return journal.TypeText{Recovery: t.Recovery, ManualAction: t.ManualAction}
		})
	}
	return s
}

// SetPolicy makes p, which must not be nil, the policy for requests that
// start from now on. It is safe to call concurrently with the handlers.
func (s *PolicyServer) SetPolicy(p *policy.Policy) {
	if p == nil {
		panic("server: nil policy")
	}
	s.policy.Store(p)
	if s.fleet != nil {
		s.fleet.SetConfig(p.Fleet)
	}
}

// Policy is the policy in force (PolicySource).
func (s *PolicyServer) Policy() *policy.Policy { return s.policy.Load() }

// Classify validates req (see ValidateClassifyRequest) and classifies its
// failure. A validation error is returned as is; NewGRPCServer's interceptor
// turns it into codes.InvalidArgument.
func (s *PolicyServer) Classify(_ context.Context, req *policydv1.ClassifyRequest) (*policydv1.ClassifyResponse, error) {
	if err := validate.ClassifyRequest(req); err != nil {
		return nil, err
	}
	c := s.policy.Load().Classifier.Classify(req.GetFailure(), req.GetOptions(), req.GetProfile())
	return &policydv1.ClassifyResponse{Classification: c}, nil
}

// NextDelay validates req (see ValidateNextDelayRequest) and decides what to
// do after the failed attempt, with the server's clock and jitter source.
// With a context_id and the journal on, the attempt and decision are
// recorded in the same call; Decision.journaled says whether they were
// committed. A journal that is down or slow never fails the call.
func (s *PolicyServer) NextDelay(ctx context.Context, req *policydv1.NextDelayRequest) (*policydv1.NextDelayResponse, error) {
	p := s.policy.Load()
	if err := validate.NextDelayRequest(req, p); err != nil {
		return nil, err
	}
	profile := policy.ProfileName(req.GetProfile()) // resolved once for the call
	d := p.Decide(req, policy.Call{Now: s.now(), Rand: s.rand, Profile: profile, Fleet: s.fleet,
		Tenant: auth.TenantFrom(ctx), ClientID: clientID(ctx, req), Origin: origin(ctx)})
	j := s.journalDecision(ctx, req, d)
	d.Journaled = j == JournalCommitted
	if s.observer != nil {
		s.observer.Decided(profile, d, j)
	}
	return &policydv1.NextDelayResponse{Decision: d}, nil
}

// ListProfiles returns every profile in force, sorted by name.
func (s *PolicyServer) ListProfiles(context.Context, *policydv1.ListProfilesRequest) (*policydv1.ListProfilesResponse, error) {
	p := s.policy.Load()
	resp := &policydv1.ListProfilesResponse{}
	for _, name := range p.ProfileNames() {
		resp.Profiles = append(resp.Profiles, policy.ProfileProto(p.Profiles[name]))
	}
	return resp, nil
}

// GetProfile returns the named profile; a missing name is InvalidArgument,
// an unknown one a *NotFoundError.
func (s *PolicyServer) GetProfile(_ context.Context, req *policydv1.GetProfileRequest) (*policydv1.GetProfileResponse, error) {
	name := req.GetName()
	if name == "" {
		return nil, validate.Fieldf("name", "required")
	}
	if err := validate.Name("name", name); err != nil {
		return nil, err
	}
	p := s.policy.Load()
	prof, ok := p.Profiles[name]
	if !ok {
		return nil, notFoundf("profile %q not found; known: %s", name, strings.Join(p.ProfileNames(), ", "))
	}
	return &policydv1.GetProfileResponse{Profile: policy.ProfileProto(prof)}, nil
}

// clientID is the request's client_id, else the connection's peer address:
// a process keeps its connection, so the breaker's distinct-client count
// still means distinct processes for clients that send none.
func clientID(ctx context.Context, req *policydv1.NextDelayRequest) string {
	if id := req.GetClientId(); id != "" {
		return id
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return "peer:" + p.Addr.String()
	}
	return ""
}
