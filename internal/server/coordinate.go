package server

import (
	"errors"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/auth"
	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/policy"
	"github.com/policyd/policyd/internal/validate"
)

// maxStreamTargets bounds the targets one stream subscribes to: a client
// process calls a handful of models with a handful of keys.
const maxStreamTargets = 1024

// maxParked bounds one report's parked gauge: a gate holds calls a process
// makes, and the release window is sized by their total.
const maxParked = 1 << 20

// Coordinate implements FleetService.Coordinate: reports up, assignments
// down, for one client process (docs/fleet.md, "The Coordinate stream").
func (s *FleetServer) Coordinate(stream grpc.BidiStreamingServer[policydv1.CoordinateRequest, policydv1.CoordinateResponse]) error {
	if err := s.on(); err != nil {
		return err
	}
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return recvEnd(err)
	}
	if err := validate.CoordinateRequest(first, true); err != nil {
		return err
	}
	profile := policy.ProfileName(first.GetProfile())
	if s.policies != nil {
		if _, ok := s.policies.Policy().Profiles[profile]; !ok {
			return validate.Fieldf("profile", "unknown profile %q", profile)
		}
	}
	c := &coordination{s: s, stream: stream, tenant: auth.TenantFrom(ctx), client: first.GetClientId(), origin: origin(ctx), profile: profile,
		subs: make(map[fleet.Target]*subscription)}
	s.fleet.StreamOpened()
	defer s.fleet.StreamClosed()

	// Recv blocks, so it runs on its own goroutine; Send stays on this one.
	msgs := make(chan *policydv1.CoordinateRequest)
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()

	if err := c.report(first); err != nil {
		return err
	}
	for {
		// The fleet's clock (fleet.Fleet.Run) ticks for every stream: a
		// tick checks this stream's refreshes and idle targets.
		changes, tick := s.fleet.NextTransition(), s.fleet.NextTick()
		select {
		case m := <-msgs:
			if err := validate.CoordinateRequest(m, false); err != nil {
				return err
			}
			if err := c.report(m); err != nil {
				return err
			}
		case err := <-recvErr:
			return recvEnd(err)
		case <-changes:
			if err := c.push(false); err != nil {
				return err
			}
		case <-tick:
			if err := c.push(true); err != nil {
				return err
			}
		case <-s.drain:
			// The client reconnects, to this replica's successor or another;
			// a graceful stop does not wait for the stream.
			return status.Error(codes.Unavailable, "policyd is shutting down; reconnect")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// recvEnd is the stream's end when Recv fails: the client closing its side
// ends it cleanly.
func recvEnd(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// coordination is one stream's state.
type coordination struct {
	s       *FleetServer
	stream  grpc.BidiStreamingServer[policydv1.CoordinateRequest, policydv1.CoordinateResponse]
	tenant  string
	client  string
	origin  fleet.Origin
	profile string
	subs    map[fleet.Target]*subscription
}

// subscription is a target the client reported, and what it was last sent.
type subscription struct {
	sent       fleet.Assignment
	sentAt     time.Time
	reportedAt time.Time
}

// report applies m's usage and answers with the assignments of its targets
// that are new, changed or due a refresh.
func (c *coordination) report(m *policydv1.CoordinateRequest) error {
	now := c.s.fleet.Now()
	if len(m.GetUsage()) > 0 {
		// The tenant's report rate: a flood is refused before it takes the
		// fleet's lock, and only this tenant's streams feel it.
		if err := c.s.fleet.AdmitReports(c.target(m.GetUsage()[0].GetTarget()), len(m.GetUsage())); err != nil {
			return err
		}
	}
	for i, u := range m.GetUsage() {
		t := c.target(u.GetTarget())
		sub := c.subs[t]
		// The counts are bounded by the time the server saw pass since the
		// target's last report on this stream (a second's grace for the
		// network), not only by the elapsed time the client declares.
		var interval time.Duration
		if sub != nil {
			interval = now.Sub(sub.reportedAt) + time.Second
		}
		if err := validate.Usage(i, u, interval); err != nil {
			// The usages before it stay applied; the client learns which
			// field is wrong.
			return err
		}
		if sub == nil {
			if len(c.subs) >= maxStreamTargets {
				return validate.Fieldf("usage", "more than %d targets on one stream", maxStreamTargets)
			}
			sub = &subscription{}
			c.subs[t] = sub
		}
		sub.reportedAt = now
		lim := fleet.ReadLimits(t.Provider, u.GetRateLimitHeaders(), now)
		c.s.fleet.Report(fleet.Usage{Target: t, ClientID: c.client, Origin: c.origin, Elapsed: u.GetElapsed().AsDuration(),
			Admitted: int64(u.GetAdmitted()), Shed: int64(u.GetShed()), FellBack: int64(u.GetFellBack()), Succeeded: int64(u.GetSucceeded()),
			Failed: int64(u.GetFailed()), Retries: int64(u.GetRetries()),
			Parked: int64(min(u.GetParked(), maxParked)), ParkedNew: int64(u.GetParkedNew()), Released: int64(u.GetReleased()),
			RequestsPerMinute: lim.RequestsPerMinute, InputTokensPerMinute: lim.InputTokensPerMinute,
			OutputTokensPerMinute: lim.OutputTokensPerMinute, RemainingShare: lim.RemainingShare, Left: lim.Left,
			FirstAttemptTokens: int64(u.GetFirstAttemptInputTokens()), RetryTokens: int64(u.GetRetryInputTokens()),
			InputTokensUsed: int64(u.GetInputTokensUsed()), InputTokensEstimated: int64(u.GetInputTokensEstimatedForUsed()),
			OutputTokensUsed: int64(u.GetOutputTokensUsed()), OutputCalls: int64(u.GetOutputTokensUsedCalls()),
			BatchFirst: int64(u.GetBatchFirstAttempts()), InFlight: int64(min(u.GetInFlight(), maxParked))})
	}
	if len(m.GetUsage()) == 0 {
		return nil
	}
	return c.push(false)
}

// push sends, in one message, the assignments that changed (or, with
// refresh, are due a refresh or an abandon).
func (c *coordination) push(refresh bool) error {
	now := c.s.fleet.Now()
	cfg := c.s.fleet.Config()
	sw := c.switches()
	var out []*policydv1.Assignment
	for t, sub := range c.subs {
		if refresh && now.Sub(sub.reportedAt) >= cfg.Stream.AbandonAfter {
			out = append(out, &policydv1.Assignment{Target: targetProto(t), Abandon: true})
			delete(c.subs, t)
			continue
		}
		a := c.s.fleet.Assign(t, c.client).Masked(sw)
		due := sub.sentAt.IsZero() || (refresh && now.Sub(sub.sentAt) >= cfg.Stream.TTL*2/3)
		if !due && !a.Differs(sub.sent, sub.sentAt, now) {
			continue
		}
		sub.sent, sub.sentAt = a, now
		out = append(out, c.assignmentProto(t, a))
		c.s.fleet.CountAssignments(t, 1)
	}
	if len(out) == 0 {
		return nil
	}
	return c.stream.Send(&policydv1.CoordinateResponse{Assignments: out})
}

// switches are the client's profile's fleet mechanisms: a profile with the
// breaker off is never gated by it, and so on.
func (c *coordination) switches() fleet.Switches {
	if c.s.policies == nil {
		return fleet.AllOn
	}
	if p, ok := c.s.policies.Policy().Profiles[c.profile]; ok {
		return p.Fleet
	}
	return fleet.AllOn
}

func (c *coordination) target(t *policydv1.BucketTarget) fleet.Target {
	return fleet.Target{Tenant: c.tenant, Provider: t.GetProvider(), Model: t.GetModel(), KeyID: t.GetKeyId()}
}

func targetProto(t fleet.Target) *policydv1.BucketTarget {
	return &policydv1.BucketTarget{Provider: t.Provider, Model: t.Model, KeyId: t.KeyID}
}

func (c *coordination) assignmentProto(t fleet.Target, a fleet.Assignment) *policydv1.Assignment {
	out := &policydv1.Assignment{
		Target:        targetProto(t),
		Ttl:           durationpb.New(a.TTL),
		Breaker:       policy.BreakerStateProto(a.Breaker),
		AdmitFraction: a.AdmitFraction,
		ProbePermits:  a.ProbePermits,
		Reason:        a.Reason,
	}
	if a.Hold > 0 {
		out.Hold = durationpb.New(a.Hold)
	}
	if a.Stop > 0 {
		out.Stop = durationpb.New(a.Stop)
	}
	if a.ParkHint > 0 {
		out.ParkHint = durationpb.New(a.ParkHint)
	}
	if a.Classes {
		out.BatchAdmitFraction = proto.Float64(a.BatchAdmitFraction)
	}
	if a.Leased {
		out.InFlightLease = proto.Uint32(a.InFlightLease)
	}
	if a.Permits {
		out.PacePermits = proto.Uint64(a.PacePermits)
	}
	if !a.Admits() && c.s.policies != nil {
		out.Fallback = c.s.policies.Policy().GateFallback(t, a.Cause, c.s.fleet)
	}
	return out
}
