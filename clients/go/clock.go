package policyd

import (
	"context"
	"math/rand/v2"
	"time"
)

// Clock is the client's source of time: Now for elapsed time and deadlines,
// NewTimer for the waits between attempts. The default is the system clock;
// tests inject one (WithClock) to run retry sequences without sleeping.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// Timer is a stoppable one-shot timer, as time.Timer.
type Timer interface {
	// C delivers the time once the timer fires.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it stopped it.
	Stop() bool
}

// Rand is the random source of the fail-open policy's jitter: a float in
// [0, 1). *math/rand/v2.Rand satisfies it.
type Rand interface{ Float64() float64 }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) Timer { return sysTimer{time.NewTimer(d)} }

type sysTimer struct{ t *time.Timer }

func (t sysTimer) C() <-chan time.Time { return t.t.C }
func (t sysTimer) Stop() bool          { return t.t.Stop() }

// systemRand draws from math/rand/v2's global source, safe for concurrent use.
type systemRand struct{}

func (systemRand) Float64() float64 { return rand.Float64() }

// sleep waits d on clock, or until ctx is done, whichever comes first; it
// returns ctx's cause when ctx ended the wait.
func sleep(ctx context.Context, clock Clock, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	if d <= 0 {
		return nil
	}
	t := clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C():
		return nil
	}
}
