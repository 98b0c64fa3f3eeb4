package strategy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Action is what the caller should do next.
type Action int

const (
	// ActionRetry means wait Delay, then try again.
	ActionRetry Action = iota + 1
	// ActionStop means give up and surface the failure.
	ActionStop
	// ActionFallBack means try something else: Fallback says what.
	ActionFallBack
)

// StopReason says why the answer is not to retry.
type StopReason int

const (
	StopNone StopReason = iota
	// StopNotRetryable: the failure type is never retried.
	StopNotRetryable
	// StopAttemptsExhausted: the attempt budget is spent.
	StopAttemptsExhausted
	// StopDeadline: waiting would pass the caller's deadline or time budget.
	StopDeadline
	// StopHintAboveCeiling: the server asked for a longer wait than the ceiling.
	StopHintAboveCeiling
	// StopIrreversible: the operation is not safe to repeat.
	StopIrreversible
)

// Safety is whether an operation may be repeated.
type Safety int

const (
	// SafetySafe operations (reads, model requests) may always be retried.
	SafetySafe Safety = iota + 1
	// SafetyConditional operations (checkpointed file writes) may be retried after a rollback.
	SafetyConditional
	// SafetyIrreversible operations (shell exec, external writes, deploys)
	// are retried only when explicitly allowed.
	SafetyIrreversible
)

// Rand is the random source of jitter: a float in [0, 1).
// *math/rand/v2.Rand satisfies it.
type Rand interface{ Float64() float64 }

// SystemRand is a Rand over math/rand/v2's global source, which is safe for
// concurrent use: the daemon's and the CLI's jitter.
type SystemRand struct{}

// Float64 returns a pseudo-random number in [0, 1).
func (SystemRand) Float64() float64 { return rand.Float64() }

// Input is what a decision depends on besides the strategy.
type Input struct {
	// Retryable is the classification's verdict.
	Retryable bool
	// Attempt is how many attempts were made, the failed one included (1-based).
	Attempt int
	// RetryAfter is the server's delay hint, when HasRetryAfter.
	RetryAfter    time.Duration
	HasRetryAfter bool
	// Now, Deadline (zero: none), Elapsed (since the first attempt) and
	// Budget (the total time allowed, 0: none) bound the wait.
	Now      time.Time
	Deadline time.Time
	Elapsed  time.Duration
	Budget   time.Duration
	// Safety of the operation; AllowIrreversible lets irreversible ones retry.
	Safety            Safety
	AllowIrreversible bool
	// MaxAttemptsCap and MaxDelayCap are global caps (0: none).
	MaxAttemptsCap int
	MaxDelayCap    time.Duration
}

// Decision is the answer.
type Decision struct {
	Action       Action
	Delay        time.Duration
	AttemptsLeft int
	StopReason   StopReason
	// Why explains a stop or a fallback in a sentence.
	Why      string
	Fallback FallbackKind
}

// Decide answers what to do after a failed attempt. The delay is within
// [0, Max] (and the global cap), never lands past the deadline or budget,
// and the same inputs and random draws give the same answer.
func (s Strategy) Decide(in Input, rnd Rand) Decision {
	maxAttempts := s.MaxAttempts
	if in.MaxAttemptsCap > 0 && (maxAttempts == 0 || in.MaxAttemptsCap < maxAttempts) {
		maxAttempts = in.MaxAttemptsCap
	}
	left := maxAttempts - in.Attempt
	if left < 0 {
		left = 0
	}
	stop := func(reason StopReason, why string) Decision {
		return Decision{Action: ActionStop, StopReason: reason, Why: why}
	}
	// fallBackOr falls back when the strategy has somewhere to go, else stops.
	fallBackOr := func(reason StopReason, why string) Decision {
		if s.Fallback != FallbackNone {
			return Decision{Action: ActionFallBack, StopReason: reason, Fallback: s.Fallback,
				Why: why + "; fall back to " + s.Fallback.String()}
		}
		return stop(reason, why)
	}

	if !in.Retryable || !s.Retry {
		return fallBackOr(StopNotRetryable, "the failure is not retryable")
	}
	if in.Safety == SafetyIrreversible && !in.AllowIrreversible {
		return stop(StopIrreversible, "the operation is irreversible; retrying it could repeat its effect")
	}
	if in.Attempt >= maxAttempts {
		return fallBackOr(StopAttemptsExhausted, fmt.Sprintf("all %d attempts were used", maxAttempts))
	}
	if s.FallbackAfter > 0 && in.Attempt >= s.FallbackAfter && s.Fallback != FallbackNone {
		return Decision{Action: ActionFallBack, StopReason: StopNone, Fallback: s.Fallback, AttemptsLeft: left,
			Why: fmt.Sprintf("%d attempts failed; fall back to %s", in.Attempt, s.Fallback)}
	}

	delay := s.jittered(in.Attempt, rnd)
	if s.HonorRetryAfter && in.HasRetryAfter && in.RetryAfter == 0 && s.RetryAfterZero == RetryAfterZeroNow {
		return s.bounded(in, 0, left, stop)
	}
	if s.HonorRetryAfter && in.HasRetryAfter && in.RetryAfter > 0 {
		ceiling := s.RetryAfterCeiling
		if in.MaxDelayCap > 0 && (ceiling == 0 || in.MaxDelayCap < ceiling) {
			ceiling = in.MaxDelayCap
		}
		hint, above := in.RetryAfter, ceiling > 0 && in.RetryAfter > ceiling
		switch {
		case above && s.AboveCeiling == AboveCeilingBackoff:
			// keep the backoff: the hint is not trusted
		case above && s.AboveCeiling == AboveCeilingStop:
			return fallBackOr(StopHintAboveCeiling,
				fmt.Sprintf("the server asked to wait %v, above the %v ceiling", in.RetryAfter, ceiling))
		default:
			if above { // clamp
				hint = ceiling
			}
			hint = s.hinted(hint, rnd)
			if in.MaxDelayCap > 0 && hint > in.MaxDelayCap {
				hint = in.MaxDelayCap // the operator's hard cap; the hint itself is within it
			}
			if s.RetryAfterMode == RetryAfterOverride || hint > delay {
				// The hint is the server's word: the backoff cap does not shorten it.
				return s.bounded(in, hint, left, stop)
			}
		}
	}
	if in.MaxDelayCap > 0 && delay > in.MaxDelayCap {
		delay = in.MaxDelayCap
	}
	return s.bounded(in, delay, left, stop)
}

// bounded retries after delay unless that passes the deadline or budget.
func (s Strategy) bounded(in Input, delay time.Duration, left int, stop func(StopReason, string) Decision) Decision {
	if !in.Deadline.IsZero() && in.Now.Add(delay).After(in.Deadline) {
		return stop(StopDeadline, fmt.Sprintf("waiting %v would pass the deadline", delay.Round(time.Millisecond)))
	}
	if in.Budget > 0 && in.Elapsed+delay > in.Budget {
		return stop(StopDeadline, fmt.Sprintf("waiting %v would exceed the %v time budget", delay.Round(time.Millisecond), in.Budget))
	}
	return Decision{Action: ActionRetry, Delay: delay, AttemptsLeft: left}
}

// hinted is the server's delay with the padding and the hint jitter, which
// only ever lengthen it.
func (s Strategy) hinted(hint time.Duration, rnd Rand) time.Duration {
	f := 1 + s.RetryAfterPadding
	if s.RetryAfterJitter > 0 {
		r := 0.5
		if rnd != nil {
			r = rnd.Float64()
		}
		f += s.RetryAfterJitter * r
	}
	d := float64(hint) * f
	if d > float64(math.MaxInt64) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(d)
}

// jittered is the backoff after attempt with the strategy's jitter, capped.
func (s Strategy) jittered(attempt int, rnd Rand) time.Duration {
	d := s.backoff(attempt)
	r := 0.5
	if rnd != nil && s.Jitter != JitterNone {
		r = rnd.Float64()
	}
	switch s.Jitter {
	case JitterFull:
		return s.capped(float64(d) * r)
	case JitterEqual:
		return s.capped(float64(d)/2 + float64(d)/2*r)
	case JitterDecorrelated:
		prev := s.InitialDelay
		if attempt > 1 {
			prev = s.backoff(attempt - 1)
		}
		lo, hi := float64(s.InitialDelay), 3*float64(prev)
		if hi < lo {
			hi = lo
		}
		return s.capped(lo + (hi-lo)*r)
	case JitterProportional:
		return s.capped(float64(d) * (1 + s.JitterFraction*(2*r-1)))
	case JitterDown:
		return s.capped(float64(d) * (1 - s.JitterFraction*r))
	}
	return d
}
