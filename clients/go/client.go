package policyd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	policydv1 "github.com/policyd/policyd/clients/go/internal/gen/policyd/v1"
)

// Client runs operations under policyd's retry policy. It is safe for
// concurrent use; make one per process and Close it at exit.
type Client struct {
	cfg     config
	conn    *grpc.ClientConn // owned (Dial); nil for New
	addr    string
	policy  policydv1.PolicyServiceClient
	journal policydv1.JournalServiceClient

	degraded atomic.Bool // the last RPC failed: policyd is unreachable or slow
	warned   sync.Map    // warnings given once per client
	bg       sync.WaitGroup

	// The fleet gate (gate.go) and its stream (coordinate.go); gate is nil
	// with WithFleetGate(false).
	gate          *gate
	fleet         policydv1.FleetServiceClient
	coordMu       sync.Mutex
	coord         *coordinator
	streamStarted atomic.Bool   // started once, or the client is closed
	kick          chan struct{} // urgent reports to send (coordinate.go)
	closing       chan struct{} // closed by Close: background retries stop
	closeOnce     sync.Once

	otel telemetry // OpenTelemetry's instruments (otel.go)
}

// Dial returns a Client of the policyd at addr; an empty addr means
// $POLICYD_ADDR, else DefaultAddr. addr is [http://|https://]host[:port]
// (port DefaultPort when none is given; https:// turns TLS on); anything
// else is Dial's error. It does not connect: a daemon that is down when
// Dial runs (or later) makes the client fail open, not fail.
// The connection is plaintext unless WithTLS, WithClientCert (or
// $POLICYD_TLS_CA, $POLICYD_TLS_CERT and $POLICYD_TLS_KEY) or
// WithDialOptions say otherwise; a token (WithToken, else $POLICYD_TOKEN)
// goes with every call. A CA or client certificate file that cannot be
// read is Dial's error.
func Dial(addr string, opts ...Option) (*Client, error) {
	if addr == "" {
		addr = os.Getenv(EnvAddr)
	}
	if addr == "" {
		addr = DefaultAddr
	}
	cfg := newConfig(opts)
	cfg.fromEnv()
	parsed, err := parseAddress(addr)
	if err != nil {
		return nil, fmt.Errorf("policyd: dial: %w (from %s or Dial's argument)", err, EnvAddr)
	}
	addr = parsed.target
	cfg.tls = cfg.tls || parsed.tls
	creds := insecure.NewCredentials()
	if cfg.tls {
		if creds, err = cfg.transportCredentials(); err != nil {
			return nil, fmt.Errorf("policyd: dial %q: %w", addr, err)
		}
	}
	dialOpts := []grpc.DialOption{grpc.WithTransportCredentials(creds),
		// The fleet stream can sit idle: pings find a dead connection, no
		// more often than policyd's keepalive enforcement allows.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveInterval, Timeout: 20 * time.Second}),
		// Redial at least every second while policyd is away, so that the
		// calls and the fleet stream notice its return within about a second
		// (gRPC's default waits up to two minutes).
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: reconnectParams, MinConnectTimeout: 20 * time.Second})}
	if cfg.token != "" && !cfg.tls && len(cfg.dialOptions) == 0 && !isLoopbackTarget(addr) {
		return nil, fmt.Errorf("policyd: dial %q: %s", addr, plaintextTokenError(addr))
	}
	if cfg.token != "" {
		dialOpts = append(dialOpts, grpc.WithPerRPCCredentials(&bearerToken{
			header: "Bearer " + cfg.token, addr: addr, loopback: isLoopbackTarget(addr),
		}))
	}
	dialOpts = append(dialOpts, cfg.dialOptions...)
	conn, err := grpc.NewClient(addr, dialOpts...)
	if err != nil {
		return nil, fmt.Errorf("policyd: dial %q: %w", addr, err)
	}
	c := newClient(conn, cfg)
	c.conn, c.addr = conn, addr
	return c, nil
}

// New returns a Client over an existing connection, which the caller keeps
// owning (Close does not close it).
func New(conn grpc.ClientConnInterface, opts ...Option) *Client {
	return newClient(conn, newConfig(opts))
}

func newClient(conn grpc.ClientConnInterface, cfg config) *Client {
	c := &Client{
		cfg:     cfg,
		policy:  policydv1.NewPolicyServiceClient(conn),
		journal: policydv1.NewJournalServiceClient(conn),
		fleet:   policydv1.NewFleetServiceClient(conn),
		kick:    make(chan struct{}, 1),
		closing: make(chan struct{}),
		otel:    newTelemetry(),
	}
	if cfg.fleetGate {
		c.gate = newGate(cfg.gateGrace)
	}
	return c
}

// Close closes the fleet stream (its last report sent, at most a quarter
// of a second), waits for journal records still being sent (each bounded
// by the daemon timeout; retries waiting for policyd to come back are
// dropped) and closes the connection Dial opened.
func (c *Client) Close() error {
	c.stopStream()
	c.closeOnce.Do(func() { close(c.closing) })
	c.bg.Wait()
	if c.conn != nil {
		return c.conn.Close()
	}
	return nil
}

// AttemptFunc is one attempt of an operation; attempt counts from 1. It
// should honour ctx, which carries the caller's deadline and cancellation.
type AttemptFunc func(ctx context.Context, attempt int) error

// Do runs fn until it succeeds or policyd says to stop. After a failure it
// maps the error (FailureFromError), asks policyd's NextDelay, and then
// waits the delay and tries again, stops, or hands the fallback hint to the
// call's FallbackFunc. The wait ends at once when ctx is done, and never
// runs past ctx's deadline.
//
// Do returns nil on success; otherwise an *Error carrying the last
// attempt's error (errors.Is/As reach it), the decision and its recovery
// action, or the error a FallbackFunc returned. On success no RPC is made,
// except to finish a journaled context that saw failures.
func (c *Client) Do(ctx context.Context, call Call, fn AttemptFunc) error {
	if call.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, call.Timeout)
		defer cancel()
	}
	return c.do(ctx, call, fn, false)
}

// do is Do; noFallback: the call has no FallbackFunc, whatever the
// client's WithFallback (the transport cannot change its request).
func (c *Client) do(ctx context.Context, call Call, fn AttemptFunc, noFallback bool) error {
	if err := call.Class.check(); err != nil {
		return err
	}
	r := c.newRun(ctx, call, noFallback)
	defer r.ended(ctx)
	for attempt := 1; ; attempt++ {
		if attempt == 1 {
			// The fleet gate: a table lookup, no RPC.
			if err := r.admit(ctx); err != nil {
				return err
			}
		} else if r.gated {
			// A retry passes the gate too: an open breaker parks it until
			// the fleet sees the provider back.
			if err := r.admitRetry(ctx, attempt); err != nil {
				return err
			}
			c.gate.countRetry(c.cfg.clock.Now(), r.target, r.call.inputTokens())
		}
		began := c.cfg.clock.Now()
		err := r.attempt(ctx, attempt, fn)
		if err == nil {
			if r.gated && c.gate.record(c.cfg.clock.Now(), r.target, true) {
				c.kickStream() // a probe's success: the fleet waits for it
			}
			r.finish(ctx, policydv1.Outcome_OUTCOME_RESOLVED)
			return nil
		}
		took := c.cfg.clock.Now().Sub(began)
		f := r.failure(err)
		if ctx.Err() != nil {
			// The caller aborted, or its deadline passed, while the attempt
			// ran: there is nothing to decide.
			return r.giveUp(ctx, err, f, attempt, took)
		}
		if r.gated {
			c.gate.record(c.cfg.clock.Now(), r.target, false)
		}
		d, ok, aerr := r.decide(ctx, f, attempt, took)
		if aerr != nil {
			// A configuration error, not an outage: failing open would hide
			// it behind retries that look fine.
			r.finish(ctx, policydv1.Outcome_OUTCOME_FAILED)
			return &Error{Err: err, Attempts: attempt, ContextID: r.contextID, refusal: aerr}
		}
		if !ok {
			return r.giveUp(ctx, err, f, attempt, took)
		}
		c.cfg.logger.DebugContext(ctx, "policyd decision", "attempt", attempt, "action", d.Action.String(),
			"delay", d.Delay, "failure_type", d.FailureType.String(), "rule", d.Rule, "fail_open", d.FailOpen,
			"provider", r.call.Provider, "operation", r.call.Operation, "error", err)
		r.failureType = d.FailureType
		r.decided(ctx, attempt, err, d)
		switch d.Action {
		case ActionRetry:
			if err := sleep(ctx, c.cfg.clock, d.Delay); err != nil {
				r.finish(ctx, outcomeOf(ctx))
				return &Error{Err: r.lastErr, Attempts: attempt, Decision: d, ContextID: r.contextID, ctxErr: err}
			}
			continue
		case ActionFallBack:
			if fb := r.call.Fallback; fb != nil && r.fallbacks < MaxFallbacks {
				r.fallbacks++
				next, ferr := fb(ctx, r.call, Fallback{Kind: d.Fallback, Reason: d.FallbackReason, Provider: d.FallbackProvider, Model: d.FallbackModel, Err: err, Attempt: attempt, Decision: d})
				if ferr != nil {
					r.finish(ctx, policydv1.Outcome_OUTCOME_FAILED)
					return ferr
				}
				r.setCall(next)
				continue
			}
		}
		r.finish(ctx, policydv1.Outcome_OUTCOME_FAILED)
		e := &Error{Err: err, Attempts: attempt, Decision: d, ContextID: r.contextID}
		if d.Action == ActionFallBack && r.call.Fallback != nil {
			e.unfollowed = fmt.Sprintf("the call already fell back %d times (MaxFallbacks)", MaxFallbacks)
		}
		return e
	}
}

// Do runs fn under c's policy, as Client.Do does, and returns its result.
func Do[T any](ctx context.Context, c *Client, call Call, fn func(ctx context.Context, attempt int) (T, error)) (T, error) {
	var out T
	err := c.Do(ctx, call, func(ctx context.Context, attempt int) error {
		v, err := fn(ctx, attempt)
		if err == nil {
			out = v
		}
		return err
	})
	if err != nil {
		var zero T
		return zero, err
	}
	return out, nil
}

// Classify asks policyd what a failure is, under profile (empty: the
// client's, else "default"), without deciding anything or journaling it.
// Unlike Do it does not fail open: an unreachable policyd is an error.
func (c *Client) Classify(ctx context.Context, f *Failure, profile string) (Classification, error) {
	if profile == "" {
		profile = c.cfg.profile
	}
	var resp *policydv1.ClassifyResponse
	err := c.rpc(ctx, "Classify", func(ctx context.Context) (err error) {
		resp, err = c.policy.Classify(ctx, &policydv1.ClassifyRequest{Failure: f.proto(), Profile: profile})
		return err
	})
	if aerr := c.refusal("Classify", err); aerr != nil {
		return Classification{}, aerr
	}
	if err != nil {
		return Classification{}, fmt.Errorf("policyd: classify: %w", err)
	}
	return classificationFromProto(resp.GetClassification()), nil
}

// outcomeOf is how a context that ended the call ends its RetryContext:
// a passed deadline fails it, a cancellation abandons it.
func outcomeOf(ctx context.Context) policydv1.Outcome {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return policydv1.Outcome_OUTCOME_FAILED
	}
	return policydv1.Outcome_OUTCOME_ABANDONED
}

// attempt runs fn, counted in flight on the call's target meanwhile; a
// retry is counted for OpenTelemetry as it is sent.
func (r *run) attempt(ctx context.Context, attempt int, fn AttemptFunc) error {
	r.sent = attempt
	if attempt > 1 {
		r.c.otel.retried(ctx, r.call, r.failureType)
	}
	if !r.gated {
		return fn(ctx, attempt)
	}
	g, now := r.c.gate, r.c.cfg.clock.Now
	g.flight(now(), r.target, true)
	defer func() { g.flight(now(), r.target, false) }()
	return fn(ctx, attempt)
}

// run is the state of one Do. (Its fields are ordered to fit 384 bytes,
// one allocation of that size class per call.)
type run struct {
	c          *Client
	call       Call
	start      time.Time
	deadline   time.Time // zero: none
	lastErr    error
	fallbacks  int
	noFallback bool // the call has no FallbackFunc, not even the client's

	// For OpenTelemetry (otel.go): the last decision's failure type (the
	// next retry's error.type) and the attempts sent.
	failureType FailureType
	sent        int

	// The fleet gate's row of the current call (gate.go): gated is false
	// for a call without a provider, or with the gate off.
	target target
	gated  bool

	// The journal (see journal.go).
	journal   bool
	failed    bool // an attempt failed: the context exists, or will
	begun     bool
	contextID string
	pending   []*policydv1.RecordAttemptRequest
}

func (c *Client) newRun(ctx context.Context, call Call, noFallback bool) *run {
	r := &run{c: c, start: c.cfg.clock.Now(), noFallback: noFallback}
	r.setCall(call)
	if dl, ok := ctx.Deadline(); ok {
		r.deadline = dl
	}
	r.journal = c.cfg.journal || call.ContextID != ""
	r.contextID = call.ContextID
	return r
}

// setCall makes call the current one, with the client's defaults.
func (r *run) setCall(call Call) {
	if call.Profile == "" {
		call.Profile = r.c.cfg.profile
	}
	if call.Agent == "" {
		call.Agent = r.c.cfg.agent
	}
	if call.Fallback == nil {
		call.Fallback = r.call.Fallback
	}
	if call.Fallback == nil {
		call.Fallback = r.c.cfg.fallback
	}
	if r.noFallback {
		call.Fallback = nil
	}
	r.call = call
	if r.c.gate != nil {
		r.target, r.gated = targetOf(call)
	}
}

// failure maps err and adds what the call knows.
func (r *run) failure(err error) *Failure {
	r.lastErr = err
	f := FailureFromError(err)
	f.Provider, f.Model, f.Operation, f.KeyID = r.call.Provider, r.call.Model, r.call.Operation, r.call.KeyID
	if r.call.Method != "" {
		f.Method = r.call.Method
	}
	return f
}

// decide asks policyd, or the fail-open policy when policyd cannot answer.
// ok is false only when ctx ended first; aerr is policyd's answer that the
// call's configuration is wrong (refusal), on which the client does not
// fail open.
func (r *run) decide(ctx context.Context, f *Failure, attempt int, took time.Duration) (d Decision, ok bool, aerr error) {
	c := r.c
	beginErr := r.begin(ctx)
	if aerr := c.refusal("BeginContext", beginErr); aerr != nil {
		return Decision{}, false, aerr
	}
	now := c.cfg.clock.Now()
	req := &policydv1.NextDelayRequest{
		Failure:   f.proto(),
		Attempt:   int32(attempt),
		Profile:   r.call.Profile,
		Elapsed:   durationProto(now.Sub(r.start)),
		Safety:    policydv1.OperationSafety(r.call.Safety),
		ContextId: r.journalID(),
		Options:   r.options(),
		ClientId:  c.cfg.clientID,
	}
	if !r.deadline.IsZero() {
		req.Deadline = timestamppb.New(r.deadline)
	}
	var resp *policydv1.NextDelayResponse
	err := beginErr // policyd just failed to answer: do not wait for it twice
	if err == nil {
		err = c.rpc(ctx, "NextDelay", func(ctx context.Context) (err error) {
			resp, err = c.policy.NextDelay(ctx, req)
			return err
		})
	}
	if ctx.Err() != nil {
		return Decision{}, false, nil
	}
	if aerr := c.refusal("NextDelay", err); aerr != nil {
		return Decision{}, false, aerr
	}
	if err == nil {
		d = decisionFromProto(resp.GetDecision())
	} else {
		if refused(err) {
			c.warnOnce("NextDelay/"+status.Code(err).String(), "policyd: the daemon refused NextDelay; "+
				"deciding with the built-in fail-open policy", "profile", r.call.Profile, "error", err)
		}
		d = c.cfg.failOpen.Decide(f, attempt, r.call.Safety, now, r.deadline, c.cfg.rand)
		if r.gated && breakerCounts(d.FailureType) {
			c.gate.countFailedLocally(now, r.target)
		}
		if d.Action == ActionRetry && r.gated && !c.gate.allowRetry(now, r.target) {
			// Without policyd, the process's own budget limits retries
			// (never first attempts).
			d.Action, d.StopReason, d.StopText, d.Delay, d.AttemptsLeft = ActionStop, StopRetryBudgetExhausted, budgetText(r.target), 0, 0
			d.Fleet = &FleetState{BudgetExhausted: true, Changed: true, Reason: d.StopText}
		}
	}
	// Whoever decided, never wait past the caller's deadline.
	if d.Action == ActionRetry && !r.deadline.IsZero() && c.cfg.clock.Now().Add(d.Delay).After(r.deadline) {
		d.Action, d.StopReason = ActionStop, StopDeadline
		d.StopText = fmt.Sprintf("waiting %v would pass the deadline", d.Delay.Round(time.Millisecond))
		d.Delay = 0
	}
	if r.journalID() != "" && !d.Journaled {
		r.record(f, attempt, took, d)
	}
	return d, true, nil
}

func (r *run) options() *policydv1.ClassifyOptions {
	if !r.call.RetryFetchErrors && !r.call.NoContinuation {
		return nil
	}
	o := &policydv1.ClassifyOptions{RetryFetchErrors: r.call.RetryFetchErrors}
	if r.call.NoContinuation {
		off := false
		o.ContinueOnFailedApiCall = &off
	}
	return o
}

// admit runs the fleet gate before a call's first attempt. It returns nil
// when the attempt may go, after waiting out a hold; falls back through
// the call's FallbackFunc to the assignment's fallback, and gates the new
// target; or returns the *Error that stops the call (no attempt, no RPC).
func (r *run) admit(ctx context.Context) error {
	c := r.c
	for r.gated {
		c.ensureStream()
		// The target's first call waits a little for its first assignment,
		// so that a short-lived process is gated too.
		if answered, until := c.gate.awaitFirst(c.cfg.clock.Now(), time.Now(), r.target); answered != nil {
			c.kickStream()
			wait := time.Until(until)
			if !r.deadline.IsZero() {
				wait = min(wait, time.Until(r.deadline))
			}
			if wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-answered:
				case <-t.C:
				case <-ctx.Done():
				}
				t.Stop()
			}
		}
		now := c.cfg.clock.Now()
		left := time.Duration(-1)
		if !r.deadline.IsZero() {
			left = max(0, r.deadline.Sub(now))
		}
		gc := gateCall{canFallBack: r.call.Fallback != nil && r.fallbacks < MaxFallbacks,
			batch: r.call.Class == ClassBatch, inputTokens: r.call.inputTokens()}
		v := c.gate.check(now, r.target, left, gc, c.cfg.rand, c.cfg.parkLimit)
		if v.action == gatePark {
			var err error
			if v, err = r.park(ctx, v, 0); err != nil {
				return err
			}
		}
		switch v.action {
		case gateAdmit:
			return nil
		case gateWait:
			c.cfg.logger.DebugContext(ctx, "policyd: fleet hold", "target", r.target.String(), "wait", v.wait)
			if err := sleep(ctx, c.cfg.clock, v.wait); err != nil {
				return &Error{ContextID: r.contextID, ctxErr: err, gated: true}
			}
			return nil
		case gateFallBack:
			r.fallbacks++
			stop := r.gateError(v)
			d := stop.Decision
			d.Action, d.Fallback, d.FallbackProvider, d.FallbackModel = ActionFallBack, v.fallback.kind, v.fallback.provider, v.fallback.model
			d.FallbackReason = cmp.Or(v.fallback.reason, d.StopText)
			c.cfg.logger.DebugContext(ctx, "policyd: fleet gate falls back", "target", r.target.String(),
				"stop_reason", v.stopReason.String(), "provider", d.FallbackProvider, "model", d.FallbackModel)
			r.decided(ctx, 0, nil, d)
			next, err := r.call.Fallback(ctx, r.call, Fallback{Kind: d.Fallback, Reason: d.FallbackReason,
				Provider: d.FallbackProvider, Model: d.FallbackModel, Err: stop, Decision: d})
			if err != nil {
				return err
			}
			r.setCall(next)
		default:
			c.cfg.logger.DebugContext(ctx, "policyd: fleet gate stops", "target", r.target.String(),
				"stop_reason", v.stopReason.String(), "reason", v.reason)
			e := r.gateError(v)
			r.decided(ctx, 0, nil, e.Decision)
			return e
		}
	}
	return nil
}

// admitRetry runs the fleet gate before a retry (docs/clients.md,
// "Retries"): nil when it may go; the *Error that stops the call when the
// key is stopped or the park's end comes first.
func (r *run) admitRetry(ctx context.Context, attempt int) error {
	c := r.c
	now := c.cfg.clock.Now()
	left := time.Duration(-1)
	if !r.deadline.IsZero() {
		left = max(0, r.deadline.Sub(now))
	}
	v := c.gate.checkRetry(now, r.target, left, c.cfg.parkLimit)
	if v.action == gatePark {
		var err error
		if v, err = r.park(ctx, v, attempt-1); err != nil {
			r.finish(ctx, outcomeOf(ctx))
			return &Error{Err: r.lastErr, Attempts: attempt - 1, ContextID: r.contextID, ctxErr: context.Cause(ctx)}
		}
	}
	if v.action == gateAdmit || v.action == gateWait {
		return nil
	}
	r.finish(ctx, policydv1.Outcome_OUTCOME_FAILED)
	e := r.gateError(v)
	e.Err, e.Attempts, e.gated = r.lastErr, attempt-1, false // a retry, not a first attempt
	r.decided(ctx, attempt-1, r.lastErr, e.Decision)
	return e
}

// park holds an attempt the gate parked (docs/clients.md, "Parking"): no
// attempt, no RPC, until a re-check at the target's next assignment, every
// parkRecheck, or at the call's end admits or stops it. after is the failed
// attempt the parked one follows (0: it is the first). The decision hook
// sees it park; its release is a decision, and so is the stop or the
// fallback the caller makes of a verdict that is not (gateError). A
// cancelled ctx ends the wait.
func (r *run) park(ctx context.Context, v gateVerdict, after int) (gateVerdict, error) {
	c := r.c
	p := v.parked
	c.cfg.logger.DebugContext(ctx, "policyd: fleet gate parks", "target", r.target.String(), "reason", v.reason)
	if fn := c.cfg.onDecision; fn != nil {
		fn(after, nil, r.parkDecision(v, true)) // the hook's alone: parking decides nothing yet
	}
	for v.action == gatePark {
		wake := c.gate.parkWake(r.target)
		now := c.cfg.clock.Now()
		next := p.drawAt
		if p.until.Before(next) {
			next = p.until
		}
		t := c.cfg.clock.NewTimer(max(0, next.Sub(now)))
		select {
		case <-ctx.Done():
			t.Stop()
			c.gate.cancelPark(c.cfg.clock.Now(), r.target, p)
			return v, &Error{ContextID: r.contextID, ctxErr: context.Cause(ctx), gated: true}
		case <-wake:
		case <-t.C():
		}
		t.Stop()
		v = c.gate.resume(c.cfg.clock.Now(), r.target, p, c.cfg.rand)
	}
	c.cfg.logger.DebugContext(ctx, "policyd: fleet gate unparks", "target", r.target.String(), "waited", v.waited)
	v.leftPark = true
	if v.action == gateAdmit || v.action == gateWait {
		r.decided(ctx, after, nil, r.parkDecision(v, false))
	}
	return v, nil
}

// parkDecision is what the decision hook sees of a parked call: as it
// parks (parks), and as the fleet releases it (RETRY: the attempt goes).
func (r *run) parkDecision(v gateVerdict, parks bool) Decision {
	d := Decision{Action: ActionRetry, Delay: v.wait, StopReason: v.stopReason, StopText: v.reason, Strategy: gateStrategy,
		Fleet: &FleetState{Breaker: enumName(policydv1.BreakerState_name, int32(v.breaker), "BREAKER_STATE_"), Changed: true,
			Reason: v.assignmentReason, HoldRemaining: v.holdLeft, OpenRemaining: v.stopLeft},
		Parked: true, Waited: v.waited}
	d.Reason = v.reason
	if !parks {
		d.StopReason, d.StopText, d.Reason = StopReasonUnspecified, "", fmt.Sprintf("released by the fleet after %v", v.waited.Round(time.Millisecond))
	}
	return d
}

// gateError is the error of an attempt the gate did not admit; its
// decision says how long the attempt was parked, when it was.
func (r *run) gateError(v gateVerdict) *Error {
	d := Decision{
		Action: ActionStop, StopReason: v.stopReason, StopText: gateText(r.target, v), Strategy: gateStrategy,
		Fleet: &FleetState{
			Breaker: enumName(policydv1.BreakerState_name, int32(v.breaker), "BREAKER_STATE_"),
			Stopped: v.stopReason == StopFleetStop, Changed: true, Reason: v.assignmentReason,
			HoldRemaining: v.holdLeft, OpenRemaining: v.stopLeft,
		},
		Parked: v.leftPark, Waited: v.waited,
	}
	return &Error{Decision: d, ContextID: r.contextID, gated: true}
}

// decided is where every decision of the call goes: the caller's hook
// (WithOnDecision) and OpenTelemetry (otel.go). attempt is the failed
// attempt it follows (0: the gate's, before the first), err that
// attempt's error.
func (r *run) decided(ctx context.Context, attempt int, err error, d Decision) {
	if fn := r.c.cfg.onDecision; fn != nil {
		fn(attempt, err, d)
	}
	r.c.otel.decided(ctx, r.call, attempt, d)
}

// ended is the call's end for OpenTelemetry: its retries.
func (r *run) ended(ctx context.Context) { r.c.otel.ended(ctx, r.sent) }

// giveUp ends a call whose context ended: the attempt is journaled (when the
// call is) and the context finished, in the background.
func (r *run) giveUp(ctx context.Context, err error, f *Failure, attempt int, took time.Duration) error {
	if r.journal {
		if r.contextID == "" {
			r.contextID = newContextID()
		}
		r.record(f, attempt, took, Decision{})
	}
	r.finish(ctx, outcomeOf(ctx))
	return &Error{Err: err, Attempts: attempt, ContextID: r.contextID, ctxErr: context.Cause(ctx)}
}

// rpc calls policyd with the daemon timeout. A failure that means policyd
// is unreachable or slow marks the client degraded and warns once per
// outage; an answer that refuses the request (see refused) is the
// caller's to report.
func (c *Client) rpc(ctx context.Context, method string, call func(context.Context) error) error {
	rctx, cancel := context.WithTimeout(ctx, c.cfg.daemonTimeout)
	defer cancel()
	err := call(rctx)
	if err == nil || refused(err) {
		if c.degraded.CompareAndSwap(true, false) {
			c.cfg.logger.InfoContext(ctx, "policyd: daemon reachable again; decisions come from policyd", "addr", c.addr)
		}
		return err
	}
	if ctx.Err() != nil {
		return err // the caller's context ended: not the daemon's fault
	}
	if c.degraded.CompareAndSwap(false, true) {
		c.cfg.logger.WarnContext(ctx, "policyd: daemon unreachable or slow; deciding with the built-in fail-open policy "+
			"(retries connection errors, timeouts, 408, 429 and 5xx) until it answers again",
			"addr", c.addr, "method", method, "timeout", c.cfg.daemonTimeout, "error", err)
	}
	return err
}

// refused is an answer from a reachable policyd that turned the request
// down, e.g. an unknown profile (InvalidArgument) or the journal off
// (FailedPrecondition).
func refused(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition, codes.AlreadyExists,
		codes.OutOfRange, codes.PermissionDenied, codes.Unauthenticated, codes.Unimplemented:
		return true
	}
	return false
}

// warnOnce logs msg at warn level the first time key is seen.
func (c *Client) warnOnce(key, msg string, args ...any) {
	if _, seen := c.warned.LoadOrStore(key, true); !seen {
		c.cfg.logger.Warn(msg, args...)
	}
}

// logger is the client's logger; for tests and journal.go.
func (c *Client) logger() *slog.Logger { return c.cfg.logger }

func durationProto(d time.Duration) *durationpb.Duration {
	if d < 0 {
		d = 0
	}
	return durationpb.New(d)
}
