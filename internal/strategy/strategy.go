// Package strategy computes what to do after a failed attempt: retry after a
// delay, stop (and why) or fall back (to what). A Strategy is a small value
// per failure type: attempt budget, backoff shape, jitter, and how to treat
// the server's delay hint. Randomness and time are injected, so decisions
// are deterministic under test.
package strategy

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Backoff is the shape of the delay between attempts.
type Backoff int

const (
	// BackoffExponential waits Initial × Multiplier^(n-1) after attempt n.
	BackoffExponential Backoff = iota
	// BackoffLinear waits Initial + Step × (n-1) after attempt n.
	BackoffLinear
	// BackoffConstant waits Initial after every attempt (0 = immediately).
	BackoffConstant
)

var backoffNames = map[Backoff]string{BackoffExponential: "exponential", BackoffLinear: "linear", BackoffConstant: "constant"}

func (b Backoff) String() string { return backoffNames[b] }

// ParseBackoff reads "exponential", "linear" or "constant".
func ParseBackoff(s string) (Backoff, error) {
	for b, name := range backoffNames {
		if strings.EqualFold(s, name) {
			return b, nil
		}
	}
	return 0, fmt.Errorf("%q is not a backoff (want exponential, linear or constant)", s)
}

// JitterKind is how randomness spreads the computed delay.
type JitterKind int

const (
	// JitterNone keeps the computed delay.
	JitterNone JitterKind = iota
	// JitterFull picks uniformly in [0, d] (AWS "full jitter").
	JitterFull
	// JitterEqual picks uniformly in [d/2, d].
	JitterEqual
	// JitterDecorrelated picks uniformly in [Initial, 3 × previous delay].
	JitterDecorrelated
	// JitterProportional picks uniformly in [d × (1-f), d × (1+f)] for fraction f.
	JitterProportional
	// JitterDown picks uniformly in [d × (1-f), d] for fraction f, so a delay
	// never exceeds its backoff (the Stainless SDKs' 1 - 0.25 × random()).
	JitterDown
)

var jitterNames = map[JitterKind]string{
	JitterNone: "none", JitterFull: "full", JitterEqual: "equal",
	JitterDecorrelated: "decorrelated", JitterProportional: "proportional", JitterDown: "down",
}

func (j JitterKind) String() string { return jitterNames[j] }

// ParseJitter reads "none", "full", "equal", "decorrelated", "proportional" or "down".
func ParseJitter(s string) (JitterKind, error) {
	for j, name := range jitterNames {
		if strings.EqualFold(s, name) {
			return j, nil
		}
	}
	return 0, fmt.Errorf("%q is not a jitter kind (want none, full, equal, decorrelated, proportional or down)", s)
}

// RetryAfterMode is how the server's delay hint combines with the computed backoff.
type RetryAfterMode int

const (
	// RetryAfterOverride waits the hint (plus padding) instead of the backoff (seed 004).
	RetryAfterOverride RetryAfterMode = iota
	// RetryAfterAtLeast waits the larger of the hint and the backoff (seed 003).
	RetryAfterAtLeast
)

var retryAfterModeNames = map[RetryAfterMode]string{RetryAfterOverride: "override", RetryAfterAtLeast: "at_least"}

func (h RetryAfterMode) String() string { return retryAfterModeNames[h] }

// ParseRetryAfterMode reads "override" or "at_least".
func ParseRetryAfterMode(s string) (RetryAfterMode, error) {
	for h, name := range retryAfterModeNames {
		if strings.EqualFold(s, name) {
			return h, nil
		}
	}
	return 0, fmt.Errorf("%q is not a mode (want override or at_least)", s)
}

// AboveCeiling is what a strategy does with a server delay hint above its ceiling.
type AboveCeiling int

const (
	// AboveCeilingStop stops, or falls back when the strategy has a fallback:
	// the server will not serve this request within the wait we accept (seed 004).
	AboveCeilingStop AboveCeiling = iota
	// AboveCeilingBackoff ignores the hint and waits the backoff instead
	// (the Stainless SDKs: a Retry-After above 60 s is not trusted).
	AboveCeilingBackoff
	// AboveCeilingClamp waits the ceiling (seed 003: every sleep is capped).
	AboveCeilingClamp
)

var aboveCeilingNames = map[AboveCeiling]string{AboveCeilingStop: "stop", AboveCeilingBackoff: "backoff", AboveCeilingClamp: "clamp"}

func (a AboveCeiling) String() string { return aboveCeilingNames[a] }

// ParseAboveCeiling reads "stop" (which falls back when the strategy has a
// fallback), "backoff" (or its alias "ignore": the hint is ignored in
// favour of the backoff) or "clamp".
func ParseAboveCeiling(s string) (AboveCeiling, error) {
	if strings.EqualFold(s, "ignore") {
		return AboveCeilingBackoff, nil
	}
	for a, name := range aboveCeilingNames {
		if strings.EqualFold(s, name) {
			return a, nil
		}
	}
	return 0, fmt.Errorf("%q is not an above-ceiling action (want stop, backoff, ignore or clamp)", s)
}

// RetryAfterZero is what a strategy does with a server delay hint of zero
// (or a date in the past).
type RetryAfterZero int

const (
	// RetryAfterZeroBackoff reads a zero hint as no hint and waits the
	// backoff, as the Python SDKs do, so a fleet never bursts 0 s retries.
	RetryAfterZeroBackoff RetryAfterZero = iota
	// RetryAfterZeroNow retries at once, as openai-go, openai-node and the
	// Vercel AI SDK do: the server said the wait is over.
	RetryAfterZeroNow
)

var retryAfterZeroNames = map[RetryAfterZero]string{RetryAfterZeroBackoff: "backoff", RetryAfterZeroNow: "now"}

func (z RetryAfterZero) String() string { return retryAfterZeroNames[z] }

// ParseRetryAfterZero reads "backoff" (or its alias "no_hint") or "now".
func ParseRetryAfterZero(s string) (RetryAfterZero, error) {
	if strings.EqualFold(s, "no_hint") {
		return RetryAfterZeroBackoff, nil
	}
	for z, name := range retryAfterZeroNames {
		if strings.EqualFold(s, name) {
			return z, nil
		}
	}
	return 0, fmt.Errorf("%q is not a zero-hint action (want backoff, no_hint or now)", s)
}

// FallbackKind is what to fall back to.
type FallbackKind int

const (
	// FallbackNone never falls back.
	FallbackNone FallbackKind = iota
	// FallbackLargerContextModel switches to a model with a larger context window.
	FallbackLargerContextModel
	// FallbackOtherProvider switches to another provider.
	FallbackOtherProvider
	// FallbackOtherModel switches to another model of the same provider.
	FallbackOtherModel
)

var fallbackNames = map[FallbackKind]string{
	FallbackNone: "none", FallbackLargerContextModel: "larger_context_model",
	FallbackOtherProvider: "other_provider", FallbackOtherModel: "other_model",
}

func (f FallbackKind) String() string { return fallbackNames[f] }

// ParseFallback reads "none", "larger_context_model", "other_provider" or "other_model".
func ParseFallback(s string) (FallbackKind, error) {
	for f, name := range fallbackNames {
		if strings.EqualFold(s, name) {
			return f, nil
		}
	}
	return 0, fmt.Errorf("%q is not a fallback (want none, larger_context_model, other_provider or other_model)", s)
}

// Strategy is how one failure type is retried.
type Strategy struct {
	// Name identifies the strategy in decisions, e.g. "default/RATE_LIMIT".
	Name string
	// Retry is false for failures that are never retried.
	Retry bool
	// MaxAttempts is the total number of attempts allowed, the first included.
	MaxAttempts int
	// Backoff, Initial, Max, Multiplier and Step shape the delay.
	Backoff      Backoff
	InitialDelay time.Duration
	MaxDelay     time.Duration // 0 means no cap
	Multiplier   float64       // exponential; 0 means 2
	Step         time.Duration // linear; 0 means Initial
	// Jitter spreads the delay; JitterFraction is the ± fraction for proportional.
	Jitter         JitterKind
	JitterFraction float64
	// HonorRetryAfter uses the server's delay hint when there is one. A hint
	// is honoured up to RetryAfterCeiling whatever Max is: Max caps the backoff,
	// not the wait the server asked for. A hint of zero or less is no hint
	// (the SDKs back off instead of retrying at once).
	HonorRetryAfter bool
	// RetryAfterMode combines hint and backoff; RetryAfterPadding is added to the hint
	// (seed 004: 0.10, i.e. +10 %).
	RetryAfterMode    RetryAfterMode
	RetryAfterPadding float64
	// RetryAfterJitter adds uniformly up to this fraction of the hint on top of
	// it, so agents given the same Retry-After do not return in the same
	// second; never less than the server asked. 0 means none.
	RetryAfterJitter float64
	// RetryAfterCeiling is the longest hint waited for; AboveCeiling says
	// what happens above it. 0 means no ceiling.
	RetryAfterCeiling time.Duration
	AboveCeiling      AboveCeiling
	// RetryAfterZero says what a hint of zero means: no hint (the backoff,
	// the default) or "retry now".
	RetryAfterZero RetryAfterZero
	// Fallback is what to fall back to; FallbackAfter is after how many
	// failed attempts (0: only when retrying is not possible).
	Fallback      FallbackKind
	FallbackAfter int
}

// Validate reports the first nonsensical parameter, naming the field.
func (s Strategy) Validate() error {
	switch {
	case s.MaxAttempts < 0:
		return fmt.Errorf("max_attempts: %d is negative", s.MaxAttempts)
	case s.Retry && s.MaxAttempts < 1:
		return fmt.Errorf("max_attempts: must be at least 1 for a retried failure")
	case s.InitialDelay < 0:
		return fmt.Errorf("initial_delay: %v is negative", s.InitialDelay)
	case s.MaxDelay < 0:
		return fmt.Errorf("max_delay: %v is negative", s.MaxDelay)
	case s.MaxDelay > 0 && s.InitialDelay > s.MaxDelay:
		return fmt.Errorf("initial_delay: %v is above max_delay %v", s.InitialDelay, s.MaxDelay)
	case s.Multiplier < 0 || math.IsNaN(s.Multiplier) || math.IsInf(s.Multiplier, 0) || (s.Multiplier != 0 && s.Multiplier < 1):
		return fmt.Errorf("multiplier: %v must be at least 1", s.Multiplier)
	case s.Step < 0:
		return fmt.Errorf("step: %v is negative", s.Step)
	case s.JitterFraction < 0 || s.JitterFraction > 1 || math.IsNaN(s.JitterFraction):
		return fmt.Errorf("jitter_fraction: %v must be within [0, 1]", s.JitterFraction)
	case s.Jitter == JitterProportional && s.JitterFraction == 0:
		return fmt.Errorf("jitter_fraction: proportional jitter needs a fraction, e.g. 0.3")
	case s.RetryAfterPadding < 0 || s.RetryAfterPadding > 10 || math.IsNaN(s.RetryAfterPadding):
		return fmt.Errorf("retry_after_padding: %v must be within [0, 10]", s.RetryAfterPadding)
	case s.RetryAfterJitter < 0 || s.RetryAfterJitter > 1 || math.IsNaN(s.RetryAfterJitter):
		return fmt.Errorf("retry_after_jitter: %v must be within [0, 1]", s.RetryAfterJitter)
	case s.Jitter == JitterDown && s.JitterFraction == 0:
		return fmt.Errorf("jitter_fraction: down jitter needs a fraction, e.g. 0.25")
	case s.RetryAfterCeiling < 0:
		return fmt.Errorf("retry_after_ceiling: %v is negative", s.RetryAfterCeiling)
	case s.FallbackAfter < 0:
		return fmt.Errorf("fallback_after: %d is negative", s.FallbackAfter)
	}
	return nil
}

// Backoff returns the un-jittered delay after the attempt-th failed attempt
// (1-based), capped at Max.
func (s Strategy) backoff(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	var d float64
	switch s.Backoff {
	case BackoffExponential:
		m := s.Multiplier
		if m == 0 {
			m = 2
		}
		d = float64(s.InitialDelay) * math.Pow(m, float64(attempt-1))
	case BackoffLinear:
		step := s.Step
		if step == 0 {
			step = s.InitialDelay
		}
		d = float64(s.InitialDelay) + float64(step)*float64(attempt-1)
	default:
		d = float64(s.InitialDelay)
	}
	return s.capped(d)
}

// capped clamps a delay in float nanoseconds to [0, Max] (and to what a
// time.Duration holds).
func (s Strategy) capped(d float64) time.Duration {
	if math.IsNaN(d) || d < 0 {
		return 0
	}
	if s.MaxDelay > 0 && d > float64(s.MaxDelay) {
		return s.MaxDelay
	}
	if d > float64(math.MaxInt64) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(d)
}

// String renders the parameters for humans, e.g.
// "exponential 1s→60s ×2, full jitter, 5 attempts, retry-after +10% ≤10s".
func (s Strategy) String() string {
	if !s.Retry {
		return "no retry"
	}
	var b strings.Builder
	switch s.Backoff {
	case BackoffExponential:
		m := s.Multiplier
		if m == 0 {
			m = 2
		}
		fmt.Fprintf(&b, "exponential %v→%v ×%g", s.InitialDelay, capText(s.MaxDelay), m)
	case BackoffLinear:
		step := s.Step
		if step == 0 {
			step = s.InitialDelay
		}
		fmt.Fprintf(&b, "linear %v +%v →%v", s.InitialDelay, step, capText(s.MaxDelay))
	default:
		fmt.Fprintf(&b, "constant %v", s.InitialDelay)
	}
	switch s.Jitter {
	case JitterNone:
	case JitterProportional:
		fmt.Fprintf(&b, ", ±%g%% jitter", s.JitterFraction*100)
	case JitterDown:
		fmt.Fprintf(&b, ", -%g%% jitter", s.JitterFraction*100)
	default:
		fmt.Fprintf(&b, ", %s jitter", s.Jitter)
	}
	fmt.Fprintf(&b, ", %d attempts", s.MaxAttempts)
	if s.HonorRetryAfter {
		b.WriteString(", retry-after")
		if s.RetryAfterMode == RetryAfterAtLeast {
			b.WriteString(" (at least)")
		}
		if s.RetryAfterPadding > 0 {
			fmt.Fprintf(&b, " +%g%%", s.RetryAfterPadding*100)
		}
		if s.RetryAfterJitter > 0 {
			fmt.Fprintf(&b, " +0-%g%% jitter", s.RetryAfterJitter*100)
		}
		if s.RetryAfterCeiling > 0 {
			fmt.Fprintf(&b, " ≤%v", s.RetryAfterCeiling)
			if s.AboveCeiling != AboveCeilingStop {
				b.WriteString(" else " + s.AboveCeiling.String())
			}
		}
		if s.RetryAfterZero == RetryAfterZeroNow {
			b.WriteString(", 0 = now")
		}
	}
	if s.Fallback != FallbackNone {
		fmt.Fprintf(&b, ", fall back to %s", s.Fallback)
		if s.FallbackAfter > 0 {
			fmt.Fprintf(&b, " after %d", s.FallbackAfter)
		}
	}
	return b.String()
}

func capText(d time.Duration) string {
	if d == 0 {
		return "∞"
	}
	return d.String()
}
