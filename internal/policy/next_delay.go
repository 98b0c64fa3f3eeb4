package policy

import (
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/strategy"
)

// NextDelay answers what to do after a failed attempt as if the caller were
// alone (no fleet memory). now is the current time, rnd the jitter source.
func (p *Policy) NextDelay(req *policydv1.NextDelayRequest, now time.Time, rnd strategy.Rand) *policydv1.Decision {
	return p.Decide(req, Call{Now: now, Rand: rnd, Profile: ProfileName(req.GetProfile())})
}

// Call is what a decision depends on besides the request.
type Call struct {
	Now  time.Time
	Rand strategy.Rand
	// Profile is the request's profile, resolved (ProfileName) by the
	// caller once for the whole call.
	Profile string
	// Fleet, when not nil, shares this failure with every agent on the same
	// provider, model and key, and lets theirs change this answer.
	Fleet *fleet.Fleet
	// Tenant and ClientID say who asks: buckets are per tenant, breakers
	// count distinct clients.
	Tenant, ClientID string
	// Origin is the caller's authenticated identity and address: the
	// fleet counts distinct clients by it and journals it with events.
	Origin fleet.Origin
}

// verdict is a NextDelay decision as its steps build it: the strategy's
// answer (or a stream rule's stop), then what fleet memory and the
// fallback chains change. It is rendered once, as a policydv1.Decision, at
// the end.
type verdict struct {
	action       policydv1.Action
	delay        time.Duration // of a RETRY
	attemptsLeft int32
	stopReason   policydv1.StopReason
	stopText     string
	fallback     *policydv1.Fallback // of a FALL_BACK
	fleet        *fleet.State
}

// Decide answers what to do after a failed attempt. The request must be
// valid (see validate.NextDelayRequest); an unknown profile is the
// caller's to reject first.
func (p *Policy) Decide(req *policydv1.NextDelayRequest, c Call) *policydv1.Decision {
	now := c.Now
	prof := p.Profiles[c.Profile]
	opts := req.GetOptions()

	// 1. Classify (or take the caller's failure type).
	var cls *policydv1.Classification
	failureType := req.GetFailureType()
	if req.GetFailure() != nil {
		cls = p.Classifier.ClassifyAt(req.GetFailure(), opts, prof.Name, now)
		failureType = cls.GetFailureType()
	}
	applied := prof.applied[failureType]
	strat := applied.strategy
	if cls == nil {
		recovery := p.Classifier.TypeText(failureType).Recovery
		if recovery == "" {
			recovery = recoveryFor(strat)
		}
		cls = &policydv1.Classification{FailureType: failureType, Retryable: strat.Retry, Rule: "request.failure_type",
			Reason: "the caller gave the failure type", RecoveryAction: recovery}
	}
	safety := p.safety(req, prof)
	in := strategy.Input{
		Retryable:         cls.GetRetryable(),
		Attempt:           int(req.GetAttempt()),
		Now:               now,
		Elapsed:           req.GetElapsed().AsDuration(),
		Budget:            prof.Budget,
		Safety:            strategy.Safety(safety),
		AllowIrreversible: p.Caps.RetryIrreversible,
		MaxAttemptsCap:    p.Caps.MaxAttempts,
		MaxDelayCap:       p.Caps.MaxDelay,
	}
	if req.GetDeadline() != nil {
		in.Deadline = req.GetDeadline().AsTime()
	}
	if ra := cls.GetRetryAfter(); ra != nil {
		in.RetryAfter, in.HasRetryAfter = ra.AsDuration(), true
	}

	var v verdict
	// 2. The stream rules apply to failures that would otherwise be
	// retried, so a connect-phase 401 still stops as not retryable.
	if cls.GetRetryable() && strat.Retry {
		if stop, why := streamStop(prof, req.GetFailure(), failureType, opts); stop != policydv1.StopReason_STOP_REASON_UNSPECIFIED {
			v = verdict{action: policydv1.Action_ACTION_STOP, stopReason: stop, stopText: why}
			return v.render(cls, safety, applied.proto)
		}
	}
	// 3. The strategy.
	out := strat.Decide(in, c.Rand)
	v = verdict{action: actionProto(out.Action), attemptsLeft: int32(out.AttemptsLeft),
		stopReason: stopReasonProto(out.StopReason), stopText: out.Why}
	if out.Action == strategy.ActionRetry {
		v.delay = out.Delay
	}
	if out.Action == strategy.ActionFallBack {
		v.fallback = &policydv1.Fallback{Kind: fallbackProto(out.Fallback), Reason: out.Why}
	}
	if v.action == policydv1.Action_ACTION_STOP && v.stopReason == policydv1.StopReason_STOP_REASON_NOT_RETRYABLE {
		v.stopText = "not retryable: " + cls.GetRecoveryAction()
	}
	// 4. Fleet memory, then 5. the fallback chains.
	if c.Fleet != nil && req.GetFailure() != nil {
		p.applyFleet(&v, c, req.GetFailure(), failureType, cls, strat, prof, in, out)
	}
	p.applyChain(&v, c, req.GetFailure(), failureType, strat)
	return v.render(cls, safety, applied.proto)
}

// render is v as the API's Decision.
func (v *verdict) render(cls *policydv1.Classification, safety policydv1.OperationSafety, strat *policydv1.AppliedStrategy) *policydv1.Decision {
	d := &policydv1.Decision{
		Action:         v.action,
		AttemptsLeft:   v.attemptsLeft,
		Classification: cls,
		StopReason:     v.stopReason,
		StopText:       v.stopText,
		Fallback:       v.fallback,
		Safety:         safety,
		Strategy:       strat,
		Fleet:          fleetStateProto(v.fleet),
	}
	if v.action == policydv1.Action_ACTION_RETRY {
		d.Delay = durationpb.New(v.delay)
	}
	return d
}

// ProfileName is the profile a request names: an empty name means the
// default profile, everywhere (decisions, validation, metrics, cases).
func ProfileName(name string) string {
	if name == "" {
		return DefaultProfile
	}
	return name
}

// streamStop applies the profile's stream rules (seeds 000 and 001): an
// invalid stream is continued only while the caller allows it; a profile may
// leave connect-phase failures to the request layer. Mid-stream network
// failures need no switch: the classifier retries coded ones always and a
// generic "fetch failed" only with retry_fetch_errors, in every profile.
func streamStop(prof *Profile, f *policydv1.Failure, t policydv1.FailureType, opts *policydv1.ClassifyOptions) (policydv1.StopReason, string) {
	if t == policydv1.FailureType_FAILURE_TYPE_INVALID_STREAM && opts != nil && opts.ContinueOnFailedApiCall != nil && !opts.GetContinueOnFailedApiCall() {
		return policydv1.StopReason_STOP_REASON_CONTINUATION_OFF, "continue_on_failed_api_call is off: the invalid stream is not continued"
	}
	if f == nil {
		return policydv1.StopReason_STOP_REASON_UNSPECIFIED, ""
	}
	if !prof.RetryConnectPhase && f.GetPhase() == policydv1.Phase_PHASE_CONNECT {
		return policydv1.StopReason_STOP_REASON_STREAM_PHASE, "profile " + prof.Name + " does not retry failures in a stream's connect phase; the request layer does"
	}
	return policydv1.StopReason_STOP_REASON_UNSPECIFIED, ""
}

// safety is the request's safety, or the one its operation and method imply:
// model requests and GET, HEAD, OPTIONS (plus the profile's idempotent
// methods) are safe; other methods and shell, exec and deploy operations
// are irreversible; file writes are conditional; anything else is safe
// (seed 004: unknown operations default to safe).
func (p *Policy) safety(req *policydv1.NextDelayRequest, prof *Profile) policydv1.OperationSafety {
	if s := req.GetSafety(); s != policydv1.OperationSafety_OPERATION_SAFETY_UNSPECIFIED {
		return s
	}
	f := req.GetFailure()
	op := strings.ToLower(f.GetOperation())
	if isModelOperation(op) {
		return policydv1.OperationSafety_OPERATION_SAFETY_SAFE
	}
	if m := strings.ToUpper(strings.TrimSpace(f.GetMethod())); m != "" {
		switch m {
		case "GET", "HEAD", "OPTIONS":
			return policydv1.OperationSafety_OPERATION_SAFETY_SAFE
		}
		for _, im := range prof.IdempotentMethods {
			if im == m {
				return policydv1.OperationSafety_OPERATION_SAFETY_SAFE
			}
		}
		return policydv1.OperationSafety_OPERATION_SAFETY_IRREVERSIBLE
	}
	switch {
	case hasAnyPrefix(op, "shell", "exec", "deploy", "external_write", "api.write", "payment"):
		return policydv1.OperationSafety_OPERATION_SAFETY_IRREVERSIBLE
	case hasAnyPrefix(op, "file.write", "file.edit", "write_file", "edit_file", "patch"):
		return policydv1.OperationSafety_OPERATION_SAFETY_CONDITIONAL
	}
	return policydv1.OperationSafety_OPERATION_SAFETY_SAFE
}

func isModelOperation(op string) bool {
	return hasAnyPrefix(op, "chat", "completion", "complete", "embed", "messages", "responses", "generate", "model", "llm")
}

func hasAnyPrefix(s string, prefixes ...string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// recoveryFor is the recovery action of a failure type the rules data
// gives no text for (UNSPECIFIED).
func recoveryFor(s strategy.Strategy) string {
	if s.Retry {
		return "Retry as the decision says."
	}
	return "Do not retry; fix the cause first."
}
