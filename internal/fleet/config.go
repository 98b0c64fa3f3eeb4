package fleet

import (
	"errors"
	"fmt"
	"time"
)

// Config sets the fleet's mechanisms. Defaults() documents each value's reason.
type Config struct {
	Scopes  Scopes
	Hold    HoldConfig
	Stop    StopConfig
	Breaker BreakerConfig
	Budget  BudgetConfig
	// MaxBuckets bounds memory: past it, new buckets are not tracked (their
	// decisions are answered as if the caller were alone) until idle ones go.
	MaxBuckets int
	// IdleAfter: a bucket with nothing active and no failure for this long is
	// forgotten.
	IdleAfter time.Duration
}

// HoldConfig sets how a shared cooldown releases its waiters.
type HoldConfig struct {
	// Spread is the window after the hold over which waiters are released,
	// as a multiple of the hold's length: the server's own hint is the best
	// estimate of its quota window. 1.5, not 1: when the hold ends, the agents
	// it did not catch (thinking meanwhile) come back too, and the waiters
	// released over one and a half windows plus them stay near the fleet's
	// usual rate (measured in the simulation: 1.46× at 2,000 agents with 1.5,
	// 1.68× with 1; docs/fleet.md).
	Spread float64
	// MinSpread and MaxSpread bound that window.
	MinSpread, MaxSpread time.Duration
}

// StopConfig sets fleet-wide stops.
type StopConfig struct {
	// For is how long one failure stops every agent on its key; each new
	// such failure renews it.
	For time.Duration
}

// BreakerConfig sets the circuit breakers (one per availability bucket).
type BreakerConfig struct {
	// Failures counted (overloaded, server error, timeout, connection) within
	// Window from at least MinClients distinct clients open the breaker.
	Failures   int
	MinClients int
	Window     time.Duration
	// OpenFor is the first open period; it doubles, up to MaxOpenFor, each
	// time a probe fails.
	OpenFor    time.Duration
	MaxOpenFor time.Duration
	// ProbeInterval: while half-open, one retry per interval is let through
	// for the whole fleet.
	ProbeInterval time.Duration
	// CloseAfter: a half-open breaker closes after this long without a
	// counted failure (the daemon sees failures, not successes).
	CloseAfter time.Duration
}

// BudgetConfig sets the retry budgets (one per availability bucket).
type BudgetConfig struct {
	// Burst is the most tokens a bucket holds; each retry takes one.
	Burst float64
	// Floor is the refill per second.
	Floor float64
}

// Defaults are the values docs/fleet.md explains: Hystrix's and LiteLLM's
// breaker numbers, Polly's 5 s break, the SRE book's and gRPC A6's 10 %
// retry ratio (a floor of 1 retry/s is about 6 % of 200 agents' traffic).
func Defaults() Config {
	return Config{
		Scopes:     DefaultScopes(),
		Hold:       HoldConfig{Spread: 1.5, MinSpread: time.Second, MaxSpread: 30 * time.Second},
		Stop:       StopConfig{For: 60 * time.Second},
		Breaker:    BreakerConfig{Failures: 20, MinClients: 3, Window: 10 * time.Second, OpenFor: 5 * time.Second, MaxOpenFor: 60 * time.Second, ProbeInterval: time.Second, CloseAfter: 3 * time.Second},
		Budget:     BudgetConfig{Burst: 10, Floor: 1},
		MaxBuckets: 100_000,
		IdleAfter:  10 * time.Minute,
	}
}

// Validate reports the first value that cannot work, naming its field.
func (c Config) Validate() error {
	var errs []error
	check := func(ok bool, field, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("%s: "+format, append([]any{field}, args...)...))
		}
	}
	check(c.Hold.Spread >= 0 && c.Hold.Spread <= 10, "hold.spread", "%v is not in [0, 10]", c.Hold.Spread)
	check(c.Hold.MinSpread >= 0, "hold.min_spread", "%v is negative", c.Hold.MinSpread)
	check(c.Hold.MaxSpread >= c.Hold.MinSpread, "hold.max_spread", "%v is below min_spread %v", c.Hold.MaxSpread, c.Hold.MinSpread)
	check(c.Stop.For > 0, "stop.for", "%v is not positive", c.Stop.For)
	check(c.Breaker.Failures >= 1, "breaker.failures", "%d is under 1", c.Breaker.Failures)
	check(c.Breaker.MinClients >= 1, "breaker.min_clients", "%d is under 1", c.Breaker.MinClients)
	check(c.Breaker.Window >= time.Second && c.Breaker.Window <= 10*time.Minute, "breaker.window", "%v is not within 1s–10m", c.Breaker.Window)
	check(c.Breaker.OpenFor > 0, "breaker.open_for", "%v is not positive", c.Breaker.OpenFor)
	check(c.Breaker.MaxOpenFor >= c.Breaker.OpenFor, "breaker.max_open_for", "%v is below open_for %v", c.Breaker.MaxOpenFor, c.Breaker.OpenFor)
	check(c.Breaker.ProbeInterval > 0, "breaker.probe_interval", "%v is not positive", c.Breaker.ProbeInterval)
	check(c.Breaker.CloseAfter > 0, "breaker.close_after", "%v is not positive", c.Breaker.CloseAfter)
	check(c.Budget.Burst >= 1, "retry_budget.burst", "%v is under 1", c.Budget.Burst)
	check(c.Budget.Floor > 0, "retry_budget.floor", "%v is not positive", c.Budget.Floor)
	check(c.MaxBuckets >= 1, "max_buckets", "%d is under 1", c.MaxBuckets)
	check(c.IdleAfter >= c.Breaker.MaxOpenFor && c.IdleAfter >= c.Stop.For, "idle_after", "%v is shorter than a stop or an open period", c.IdleAfter)
	for s, f := range c.Scopes {
		check(f.Provider, "scopes."+s.String(), "must include the provider")
	}
	return errors.Join(errs...)
}

// Switches turn each mechanism on or off for a profile's decisions.
type Switches struct{ Hold, Stop, Breaker, Budget bool }

// AllOn is every mechanism on, each profile's default.
var AllOn = Switches{Hold: true, Stop: true, Breaker: true, Budget: true}
