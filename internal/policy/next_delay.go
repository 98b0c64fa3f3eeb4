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
	return p.Decide(req, Call{Now: now, Rand: rnd})
}

// Call is what a decision depends on besides the request.
type Call struct {
	Now  time.Time
	Rand strategy.Rand
	// Fleet, when not nil, shares this failure with every agent on the same
	// provider, model and key, and lets theirs change this answer.
	Fleet *fleet.Fleet
	// Tenant and ClientID say who asks: buckets are per tenant, breakers
	// count distinct clients.
	Tenant, ClientID string
}

// Decide answers what to do after a failed attempt. The request must be
// valid (see validate.NextDelayRequest); an unknown profile is the
// caller's to reject first.
func (p *Policy) Decide(req *policydv1.NextDelayRequest, c Call) *policydv1.Decision {
	now, rnd := c.Now, c.Rand
	prof := p.Profiles[ProfileName(req.GetProfile())]
	opts := req.GetOptions()

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

	d := &policydv1.Decision{
		Classification: cls,
		Safety:         safety,
		Strategy:       applied.proto,
	}
	// Stream rules apply to failures that would otherwise be retried, so a
	// connect-phase 401 still stops as not retryable.
	if !cls.GetRetryable() || !strat.Retry {
		// fall through to Decide, which stops or falls back
	} else if stop, why := streamStop(prof, req.GetFailure(), failureType, opts); stop != policydv1.StopReason_STOP_REASON_UNSPECIFIED {
		d.Action, d.StopReason, d.StopText = policydv1.Action_ACTION_STOP, stop, why
		return d
	}
	out := strat.Decide(in, rnd)
	d.Action = actionProto(out.Action)
	d.AttemptsLeft = int32(out.AttemptsLeft)
	d.StopReason = stopReasonProto(out.StopReason)
	d.StopText = out.Why
	if out.Action == strategy.ActionRetry {
		d.Delay = durationpb.New(out.Delay)
	}
	if out.Action == strategy.ActionFallBack {
		d.Fallback = &policydv1.Fallback{Kind: fallbackProto(out.Fallback), Reason: out.Why}
	}
	if d.Action == policydv1.Action_ACTION_STOP && d.StopReason == policydv1.StopReason_STOP_REASON_NOT_RETRYABLE {
		d.StopText = "not retryable: " + cls.GetRecoveryAction()
	}
	if c.Fleet != nil && req.GetFailure() != nil {
		p.applyFleet(d, c, req.GetFailure(), failureType, cls, strat, prof, in, out)
	}
	p.applyChain(d, c, req.GetFailure(), failureType, strat)
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
