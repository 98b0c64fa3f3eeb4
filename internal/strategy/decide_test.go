package strategy

import (
	"math/rand/v2"
	"testing"
	"time"
)

// fixedRand returns the same draw every time.
type fixedRand float64

func (r fixedRand) Float64() float64 { return float64(r) }

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func retryIn(attempt int) Input {
	return Input{Retryable: true, Attempt: attempt, Now: t0, Safety: SafetySafe}
}

func TestBackoffSequences(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		s    Strategy
		want []time.Duration // delays after attempts 1, 2, ...
	}{
		{"seed 002 rate limit", Strategy{Retry: true, MaxAttempts: 7, Backoff: BackoffExponential, InitialDelay: 30 * time.Second, MaxDelay: 300 * time.Second, Multiplier: 2},
			[]time.Duration{30 * time.Second, 60 * time.Second, 120 * time.Second, 240 * time.Second, 300 * time.Second, 300 * time.Second}},
		{"seed 002 linear", Strategy{Retry: true, MaxAttempts: 4, Backoff: BackoffLinear, InitialDelay: 5 * time.Second, Step: 5 * time.Second},
			[]time.Duration{5 * time.Second, 10 * time.Second, 15 * time.Second}},
		{"linear step defaults to initial", Strategy{Retry: true, MaxAttempts: 3, Backoff: BackoffLinear, InitialDelay: 2 * time.Second},
			[]time.Duration{2 * time.Second, 4 * time.Second}},
		{"seed 004 rate limit, un-jittered", Strategy{Retry: true, MaxAttempts: 8, Backoff: BackoffExponential, InitialDelay: time.Second, MaxDelay: 60 * time.Second, Multiplier: 2},
			[]time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, 60 * time.Second}},
		{"multiplier defaults to 2", Strategy{Retry: true, MaxAttempts: 4, Backoff: BackoffExponential, InitialDelay: time.Second},
			[]time.Duration{time.Second, 2 * time.Second, 4 * time.Second}},
		{"immediate", Strategy{Retry: true, MaxAttempts: 2, Backoff: BackoffConstant},
			[]time.Duration{0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for i, want := range tc.want {
				d := tc.s.Decide(retryIn(i+1), nil)
				if d.Action != ActionRetry || d.Delay != want {
					t.Errorf("attempt %d: %v %v, want retry after %v", i+1, d.Action, d.Delay, want)
				}
				if d.AttemptsLeft != tc.s.MaxAttempts-(i+1) {
					t.Errorf("attempt %d: attempts left %d, want %d", i+1, d.AttemptsLeft, tc.s.MaxAttempts-(i+1))
				}
			}
			last := tc.s.Decide(retryIn(tc.s.MaxAttempts), nil)
			if last.Action != ActionStop || last.StopReason != StopAttemptsExhausted {
				t.Errorf("attempt %d: %v %v, want stop: attempts exhausted", tc.s.MaxAttempts, last.Action, last.StopReason)
			}
		})
	}
}

func TestJitter(t *testing.T) {
	t.Parallel()
	base := Strategy{Retry: true, MaxAttempts: 10, Backoff: BackoffExponential, InitialDelay: 4 * time.Second, MaxDelay: 30 * time.Second, Multiplier: 2}
	with := func(j JitterKind, f float64) Strategy { s := base; s.Jitter, s.JitterFraction = j, f; return s }
	tests := []struct {
		name    string
		s       Strategy
		attempt int
		r       float64
		want    time.Duration
	}{
		{"full, low draw", with(JitterFull, 0), 1, 0, 0},
		{"full, half draw", with(JitterFull, 0), 2, 0.5, 4 * time.Second},
		{"equal, low draw", with(JitterEqual, 0), 1, 0, 2 * time.Second},
		{"equal, top draw", with(JitterEqual, 0), 1, 1, 4 * time.Second},
		{"proportional -30%", with(JitterProportional, 0.3), 1, 0, 2800 * time.Millisecond},
		{"proportional +30%", with(JitterProportional, 0.3), 1, 1, 5200 * time.Millisecond},
		{"proportional capped", with(JitterProportional, 0.3), 5, 1, 30 * time.Second},
		{"decorrelated first", with(JitterDecorrelated, 0), 1, 1, 12 * time.Second},
		{"decorrelated low", with(JitterDecorrelated, 0), 3, 0, 4 * time.Second},
		{"decorrelated capped", with(JitterDecorrelated, 0), 4, 1, 30 * time.Second},
		{"none ignores the draw", with(JitterNone, 0), 2, 0.1, 8 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := tc.s.Decide(retryIn(tc.attempt), fixedRand(tc.r))
			if d.Delay != tc.want {
				t.Errorf("delay %v, want %v", d.Delay, tc.want)
			}
		})
	}
}

func TestServerDelayHint(t *testing.T) {
	t.Parallel()
	seed004 := Strategy{Retry: true, MaxAttempts: 5, Backoff: BackoffExponential, InitialDelay: time.Second, MaxDelay: 60 * time.Second, Multiplier: 2,
		Jitter: JitterFull, HonorRetryAfter: true, RetryAfterMode: RetryAfterOverride, RetryAfterPadding: 0.1, RetryAfterCeiling: 10 * time.Second, Fallback: FallbackOtherProvider}
	seed003 := Strategy{Retry: true, MaxAttempts: 3, Backoff: BackoffExponential, InitialDelay: time.Second, MaxDelay: 10 * time.Second, Multiplier: 2,
		Jitter: JitterFull, HonorRetryAfter: true, RetryAfterMode: RetryAfterAtLeast, RetryAfterCeiling: 10 * time.Second, AboveCeiling: AboveCeilingClamp}
	sdk := Strategy{Retry: true, MaxAttempts: 3, Backoff: BackoffExponential, InitialDelay: 500 * time.Millisecond, MaxDelay: 8 * time.Second, Multiplier: 2,
		Jitter: JitterDown, JitterFraction: 0.25, HonorRetryAfter: true, RetryAfterMode: RetryAfterOverride, RetryAfterCeiling: time.Minute, AboveCeiling: AboveCeilingBackoff}
	spread := seed004
	spread.RetryAfterCeiling, spread.RetryAfterJitter = time.Minute, 0.2
	noFallback := seed004
	noFallback.Fallback = FallbackNone
	ignore := seed004
	ignore.HonorRetryAfter = false
	tests := []struct {
		name       string
		s          Strategy
		attempt    int
		hint       time.Duration
		wantAction Action
		wantDelay  time.Duration
		wantStop   StopReason
	}{
		{"retry-after 7 padded 10%", seed004, 1, 7 * time.Second, ActionRetry, 7700 * time.Millisecond, StopNone},
		{"retry-after at the ceiling", seed004, 1, 10 * time.Second, ActionRetry, 11 * time.Second, StopNone},
		{"retry-after above ceiling falls back", seed004, 1, 30 * time.Second, ActionFallBack, 0, StopHintAboveCeiling},
		{"above ceiling without fallback stops", noFallback, 1, 30 * time.Second, ActionStop, 0, StopHintAboveCeiling},
		{"hint ignored when not honoured", ignore, 2, 30 * time.Second, ActionRetry, time.Second, StopNone},
		{"at least: hint larger", seed003, 1, 5 * time.Second, ActionRetry, 5 * time.Second, StopNone},
		{"at least: backoff larger", seed003, 3, 100 * time.Millisecond, ActionStop, 0, StopAttemptsExhausted},
		{"at least: backoff larger, attempt 2", seed003, 2, 100 * time.Millisecond, ActionRetry, time.Second, StopNone},
		{"at least: clamped to the ceiling", seed003, 1, 60 * time.Second, ActionRetry, 10 * time.Second, StopNone},
		// The backoff cap (8 s) does not shorten a hint within the ceiling.
		{"sdk: 45 s hint above an 8 s cap", sdk, 1, 45 * time.Second, ActionRetry, 45 * time.Second, StopNone},
		{"sdk: above the ceiling, the backoff", sdk, 1, 61 * time.Second, ActionRetry, 437500 * time.Microsecond, StopNone},
		{"sdk: zero hint, the backoff", sdk, 1, 0, ActionRetry, 437500 * time.Microsecond, StopNone},
		{"hint jitter at r=0.5: +10% padding +10%", spread, 1, 40 * time.Second, ActionRetry, 48 * time.Second, StopNone},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := retryIn(tc.attempt)
			in.RetryAfter, in.HasRetryAfter = tc.hint, true
			d := tc.s.Decide(in, fixedRand(0.5))
			if d.Action != tc.wantAction || d.Delay != tc.wantDelay || d.StopReason != tc.wantStop {
				t.Errorf("got %v %v %v, want %v %v %v", d.Action, d.Delay, d.StopReason, tc.wantAction, tc.wantDelay, tc.wantStop)
			}
		})
	}
}

func TestStops(t *testing.T) {
	t.Parallel()
	s := Strategy{Retry: true, MaxAttempts: 5, Backoff: BackoffConstant, InitialDelay: 2 * time.Second}
	fb := s
	fb.Fallback, fb.FallbackAfter = FallbackOtherProvider, 2
	never := Strategy{Retry: false, Fallback: FallbackLargerContextModel}
	tests := []struct {
		name       string
		s          Strategy
		in         Input
		wantAction Action
		wantStop   StopReason
		wantFB     FallbackKind
	}{
		{"not retryable", s, Input{Retryable: false, Attempt: 1}, ActionStop, StopNotRetryable, FallbackNone},
		{"never retried, falls back", never, Input{Retryable: false, Attempt: 1}, ActionFallBack, StopNotRetryable, FallbackLargerContextModel},
		{"irreversible", s, Input{Retryable: true, Attempt: 1, Safety: SafetyIrreversible}, ActionStop, StopIrreversible, FallbackNone},
		{"irreversible allowed", s, Input{Retryable: true, Attempt: 1, Safety: SafetyIrreversible, AllowIrreversible: true}, ActionRetry, StopNone, FallbackNone},
		{"conditional retries", s, Input{Retryable: true, Attempt: 1, Safety: SafetyConditional}, ActionRetry, StopNone, FallbackNone},
		{"deadline would pass", s, Input{Retryable: true, Attempt: 1, Now: t0, Deadline: t0.Add(time.Second)}, ActionStop, StopDeadline, FallbackNone},
		{"deadline far enough", s, Input{Retryable: true, Attempt: 1, Now: t0, Deadline: t0.Add(3 * time.Second)}, ActionRetry, StopNone, FallbackNone},
		{"budget would pass", s, Input{Retryable: true, Attempt: 1, Elapsed: 9 * time.Second, Budget: 10 * time.Second}, ActionStop, StopDeadline, FallbackNone},
		{"global attempts cap", s, Input{Retryable: true, Attempt: 2, MaxAttemptsCap: 2}, ActionStop, StopAttemptsExhausted, FallbackNone},
		{"fallback after 2", fb, Input{Retryable: true, Attempt: 2}, ActionFallBack, StopNone, FallbackOtherProvider},
		{"before fallback_after", fb, Input{Retryable: true, Attempt: 1}, ActionRetry, StopNone, FallbackNone},
		{"exhausted falls back", fb, Input{Retryable: true, Attempt: 5}, ActionFallBack, StopAttemptsExhausted, FallbackOtherProvider},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := tc.s.Decide(tc.in, nil)
			if d.Action != tc.wantAction || d.StopReason != tc.wantStop || d.Fallback != tc.wantFB {
				t.Errorf("got %v %v %v (%s), want %v %v %v", d.Action, d.StopReason, d.Fallback, d.Why, tc.wantAction, tc.wantStop, tc.wantFB)
			}
			if d.Action != ActionRetry && d.Why == "" {
				t.Errorf("a stop or fallback needs a reason")
			}
		})
	}
	capped := Strategy{Retry: true, MaxAttempts: 3, Backoff: BackoffConstant, InitialDelay: time.Minute}
	if d := capped.Decide(Input{Retryable: true, Attempt: 1, MaxDelayCap: 5 * time.Second}, nil); d.Delay != 5*time.Second {
		t.Errorf("global delay cap: %v, want 5s", d.Delay)
	}
}

// Properties over many random strategies and inputs.
func TestDecideProperties(t *testing.T) {
	t.Parallel()
	gen := rand.New(rand.NewPCG(1, 2))
	dur := func(max time.Duration) time.Duration { return time.Duration(gen.Int64N(int64(max))) }
	for i := 0; i < 20000; i++ {
		s := Strategy{
			Retry: gen.IntN(5) > 0, MaxAttempts: 1 + gen.IntN(12), Backoff: Backoff(gen.IntN(3)),
			InitialDelay: dur(10 * time.Second), Multiplier: 1 + 3*gen.Float64(), Step: dur(5 * time.Second),
			Jitter: JitterKind(gen.IntN(6)), JitterFraction: 0.01 + 0.99*gen.Float64(),
			HonorRetryAfter: gen.IntN(2) == 0, RetryAfterMode: RetryAfterMode(gen.IntN(2)), RetryAfterPadding: gen.Float64(),
			RetryAfterJitter: gen.Float64() * 0.5, AboveCeiling: AboveCeiling(gen.IntN(3)),
			Fallback: FallbackKind(gen.IntN(4)), FallbackAfter: gen.IntN(4),
		}
		s.MaxDelay = s.InitialDelay + dur(2*time.Minute)
		if gen.IntN(3) == 0 {
			s.RetryAfterCeiling = dur(time.Minute) + 1
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("generated an invalid strategy: %v", err)
		}
		in := Input{Retryable: gen.IntN(4) > 0, Attempt: 1 + gen.IntN(15), Now: t0, Safety: Safety(1 + gen.IntN(3)),
			AllowIrreversible: gen.IntN(3) == 0}
		if gen.IntN(2) == 0 {
			in.RetryAfter, in.HasRetryAfter = dur(2*time.Minute), true
		}
		if gen.IntN(2) == 0 {
			in.Deadline = t0.Add(dur(3 * time.Minute))
		}
		if gen.IntN(4) == 0 {
			in.MaxDelayCap = dur(time.Minute) + 1
		}
		seed := gen.Uint64()
		d := s.Decide(in, rand.New(rand.NewPCG(seed, 0)))
		again := s.Decide(in, rand.New(rand.NewPCG(seed, 0)))
		if d != again {
			t.Fatalf("same seed, different decisions: %+v vs %+v", d, again)
		}
		if d.Action != ActionRetry {
			continue
		}
		// A hint within the ceiling is waited whatever the backoff cap; the
		// padding and hint jitter only lengthen it.
		upper, hinted := s.MaxDelay, s.HonorRetryAfter && in.HasRetryAfter && in.RetryAfter > 0
		if hinted {
			h := in.RetryAfter
			if s.RetryAfterCeiling > 0 && h > s.RetryAfterCeiling {
				h = s.RetryAfterCeiling
			}
			if hmax := time.Duration(float64(h) * (1 + s.RetryAfterPadding + s.RetryAfterJitter)); hmax > upper {
				upper = hmax + 1
			}
		}
		switch {
		case d.Delay < 0 || d.Delay > upper:
			t.Fatalf("delay %v outside [0, %v] for %+v", d.Delay, upper, s)
		case hinted && s.RetryAfterMode == RetryAfterOverride && (s.RetryAfterCeiling == 0 || in.RetryAfter <= s.RetryAfterCeiling) &&
			(in.MaxDelayCap == 0 || in.RetryAfter <= in.MaxDelayCap) && d.Delay < in.RetryAfter:
			t.Fatalf("delay %v is shorter than the server's %v", d.Delay, in.RetryAfter)
		case in.MaxDelayCap > 0 && d.Delay > in.MaxDelayCap:
			t.Fatalf("delay %v above the global cap %v", d.Delay, in.MaxDelayCap)
		case !in.Deadline.IsZero() && t0.Add(d.Delay).After(in.Deadline):
			t.Fatalf("delay %v lands past the deadline", d.Delay)
		case in.Attempt >= s.MaxAttempts:
			t.Fatalf("retry at attempt %d of %d", in.Attempt, s.MaxAttempts)
		case in.Safety == SafetyIrreversible && !in.AllowIrreversible:
			t.Fatalf("retried an irreversible operation")
		case !in.Retryable || !s.Retry:
			t.Fatalf("retried a non-retryable failure")
		case s.HonorRetryAfter && in.HasRetryAfter && s.RetryAfterCeiling > 0 && in.RetryAfter > s.RetryAfterCeiling &&
			s.AboveCeiling == AboveCeilingStop && (in.MaxDelayCap == 0 || in.MaxDelayCap >= s.RetryAfterCeiling):
			t.Fatalf("waited for a hint above the ceiling")
		}
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	ok := Strategy{Retry: true, MaxAttempts: 3, InitialDelay: time.Second, MaxDelay: time.Minute}
	tests := []struct {
		name   string
		mutate func(*Strategy)
		field  string
	}{
		{"negative attempts", func(s *Strategy) { s.MaxAttempts = -1 }, "max_attempts"},
		{"no attempts", func(s *Strategy) { s.MaxAttempts = 0 }, "max_attempts"},
		{"initial above max", func(s *Strategy) { s.InitialDelay = time.Hour }, "initial_delay"},
		{"multiplier below 1", func(s *Strategy) { s.Multiplier = 0.5 }, "multiplier"},
		{"fraction above 1", func(s *Strategy) { s.Jitter, s.JitterFraction = JitterProportional, 2 }, "jitter_fraction"},
		{"proportional without fraction", func(s *Strategy) { s.Jitter = JitterProportional }, "jitter_fraction"},
		{"negative ceiling", func(s *Strategy) { s.RetryAfterCeiling = -time.Second }, "retry_after_ceiling"},
	}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid strategy refused: %v", err)
	}
	for _, tc := range tests {
		s := ok
		tc.mutate(&s)
		err := s.Validate()
		if err == nil || len(err.Error()) < len(tc.field) || err.Error()[:len(tc.field)] != tc.field {
			t.Errorf("%s: error %v, want one starting with %q", tc.name, err, tc.field)
		}
	}
}

func TestString(t *testing.T) {
	t.Parallel()
	s := Strategy{Retry: true, MaxAttempts: 5, Backoff: BackoffExponential, InitialDelay: time.Second, MaxDelay: time.Minute, Multiplier: 2,
		Jitter: JitterFull, HonorRetryAfter: true, RetryAfterPadding: 0.1, RetryAfterCeiling: 10 * time.Second, Fallback: FallbackOtherProvider}
	want := "exponential 1s→1m0s ×2, full jitter, 5 attempts, retry-after +10% ≤10s, fall back to other_provider"
	if got := s.String(); got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func BenchmarkDecide(b *testing.B) {
	s := Strategy{Retry: true, MaxAttempts: 5, Backoff: BackoffExponential, InitialDelay: time.Second, MaxDelay: time.Minute, Multiplier: 2,
		Jitter: JitterFull, HonorRetryAfter: true, RetryAfterPadding: 0.1, RetryAfterCeiling: 10 * time.Second, Fallback: FallbackOtherProvider}
	r := rand.New(rand.NewPCG(1, 1))
	in := Input{Retryable: true, Attempt: 3, Now: t0, Deadline: t0.Add(time.Hour), RetryAfter: 7 * time.Second, HasRetryAfter: true, Safety: SafetySafe}
	b.ReportAllocs()
	for b.Loop() {
		s.Decide(in, r)
	}
}
