package fleet

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Config sets the fleet's mechanisms. Defaults() documents each value's reason.
type Config struct {
	Scopes  Scopes
	Hold    HoldConfig
	Stop    StopConfig
	Breaker BreakerConfig
	Budget  BudgetConfig
	// SlowStart ramps first attempts back after a breaker closes.
	SlowStart SlowStartConfig
	// Pacing shares a provider's request limit among the fleet's clients.
	Pacing PacingConfig
	// Stream sets the Coordinate stream's assignments.
	Stream StreamConfig
	// MaxBuckets bounds each tenant's buckets, and so memory: past it, the
	// tenant's new buckets are not tracked (their decisions are answered as
	// if the caller were alone) until idle ones go. Per tenant, so that one
	// tenant filling its share leaves every other's fleet memory as it was.
	MaxBuckets int
	// ReportsPerSecond bounds the usages (one target's counts) each tenant's
	// Coordinate streams report a second, with a second's worth as a burst;
	// a report over it is refused (RESOURCE_EXHAUSTED). Its work is under
	// the fleet's one lock: a tenant flooding reports must not slow the
	// others' decisions. 0: no limit.
	ReportsPerSecond float64
	// IdleAfter: a bucket with nothing active and no failure for this long is
	// forgotten.
	IdleAfter time.Duration
	// MaxInFlight caps the requests in flight on a target, for servers
	// and providers that throttle concurrency (a self-hosted model server,
	// a small account): "provider" or "provider/model" (lower case) → the
	// cap, leased to the clients' gates (leases.go). A model's entry wins
	// over its provider's.
	MaxInFlight map[string]int
}

// HoldConfig sets how a shared cooldown releases its waiters.
type HoldConfig struct {
	// Spread is the window after the hold over which waiters are released,
	// as a multiple of the hold's length: the server's own hint is the best
	// estimate of its quota window. 1.5, not 1: when the hold ends, the agents
	// it did not catch (thinking meanwhile) come back too, and the waiters
	// released over one and a half windows plus them stay near the fleet's
	// usual rate (measured in the simulation: 1.46× at 2,000 agents with 1.5,
	// 1.68× with 1; docs/fleet-simulation.md).
	Spread float64
	// MinSpread and MaxSpread bound that window.
	MinSpread, MaxSpread time.Duration
	// MaxHint is the longest hold one failure's delay hint sets for the
	// fleet (a hint is also cut to what the caller's own profile would
	// wait, Ask.HoldCeiling). One caller's word holds every agent of its
	// tenant on the model: a provider's Retry-After of a week, by mistake
	// or forged, must not. Five minutes: longer than any rate limit's
	// window the providers document (a minute), shorter than a quota a
	// fleet stop handles (QUOTA_EXHAUSTED stops the key instead).
	MaxHint time.Duration
}

// StopConfig sets fleet-wide stops.
type StopConfig struct {
	// For is how long one failure stops every agent on its key; each new
	// such failure renews it.
	For time.Duration
}

// BreakerConfig sets the circuit breakers (one per availability bucket).
type BreakerConfig struct {
	// The breaker opens when, within Window, at least MinVolume outcomes
	// were seen, at least FailureRate of them were counted failures
	// (overloaded, server error, timeout, connection), and the failures came
	// from at least MinClients distinct clients. Successes are known only
	// from Coordinate reports: with no stream, the rate is 1 and the breaker
	// opens at MinVolume failures.
	MinVolume   int
	FailureRate float64
	MinClients  int
	Window      time.Duration
	// It also opens when, within the last TripWindow (whole seconds; 0:
	// off), at least MinVolume outcomes were seen and at least TripRate of
	// them failed, from MinClients clients: a provider that went down is
	// known sooner than once its failures outweigh the window's successes
	// from before it (Envoy's consecutive-5xx ejection answers the same
	// need). The calls admitted before an outage keep succeeding for
	// seconds (a completion's latency), and the streams report successes
	// up to a second late, so the last 2 s still hold 10–30 % successes
	// for about five seconds: at 0.9 the simulation's outage opened the
	// breaker 4.0–5.3 s into it, barely before the window's own rule; at
	// 0.8 (seeds 1–20, both lifetimes) about a second sooner, with the
	// calls completed 0.981–1.0 of the best baseline's (0.979–1.0), the
	// attempts after detection over 0.1 × the calls started on 1 run of 40
	// (2), and with three replicas on 2 of 40 (14).
	TripWindow time.Duration
	TripRate   float64
	// OpenFor is the first open period; it doubles, up to MaxOpenFor, each
	// time a probe fails.
	OpenFor    time.Duration
	MaxOpenFor time.Duration
	// ProbeInterval: while half-open, one retry per interval is let through
	// for the whole fleet.
	ProbeInterval time.Duration
	// A half-open breaker closes after CloseSuccesses reported successes,
	// or, when no client reports on the bucket (the daemon sees failures,
	// not successes), after CloseAfter without a counted failure.
	CloseSuccesses int
	CloseAfter     time.Duration
}

// BudgetConfig sets the retry budgets (one per availability bucket).
type BudgetConfig struct {
	// Burst is the most tokens a bucket holds; each retry takes one.
	Burst float64
	// The refill per second is Floor plus Ratio times the first attempts
	// the fleet's clients reported per second over the breaker's window:
	// retries stay a share of the traffic that succeeds, whatever its size.
	Floor, Ratio float64
}

// SlowStartConfig is how a closed breaker lets the fleet back in: the share
// of first attempts the gates admit rises linearly from From to 1 over
// Window, so that the fleet does not come back as one herd (Envoy's slow
// start; its floor is 10 %).
type SlowStartConfig struct {
	Window time.Duration
	From   float64
}

// PacingConfig is quota pacing: when the rate-limit headers a client
// reports give the provider's request limit per minute, the gates admit
// first attempts at Share of that limit, split evenly by demand; 0 turns
// pacing off.
type PacingConfig struct {
	Share float64
}

// StreamConfig sets the assignments sent on Coordinate streams.
type StreamConfig struct {
	// TTL is an assignment's life; the daemon refreshes it before then.
	TTL time.Duration
	// AbandonAfter: a stream's bucket with no report for this long is
	// abandoned (the client forgets it).
	AbandonAfter time.Duration
}

// Defaults are the values docs/fleet.md explains: Hystrix's breaker numbers
// (20 requests, 50 %, 10 s) and LiteLLM's, Polly's 5 s break, the SRE
// book's and gRPC A6's 10 % retry ratio plus a floor of 1 retry/s, Envoy's
// slow start from 10 %.
func Defaults() Config {
	return Config{
		Scopes: DefaultScopes(),
		Hold:   HoldConfig{Spread: 1.5, MinSpread: time.Second, MaxSpread: 30 * time.Second, MaxHint: 5 * time.Minute},
		Stop:   StopConfig{For: 60 * time.Second},
		Breaker: BreakerConfig{MinVolume: 20, FailureRate: 0.5, MinClients: 3, Window: 10 * time.Second,
			TripWindow: 2 * time.Second, TripRate: 0.8, OpenFor: 5 * time.Second,
			MaxOpenFor: 60 * time.Second, ProbeInterval: time.Second, CloseSuccesses: 2, CloseAfter: 3 * time.Second},
		Budget:           BudgetConfig{Burst: 10, Floor: 1, Ratio: 0.1},
		SlowStart:        SlowStartConfig{Window: 5 * time.Second, From: 0.1},
		Pacing:           PacingConfig{Share: 0.93},
		Stream:           StreamConfig{TTL: 15 * time.Second, AbandonAfter: 5 * time.Minute},
		MaxBuckets:       100_000,
		ReportsPerSecond: 20_000,
		IdleAfter:        10 * time.Minute,
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
	check(c.Hold.MaxHint >= time.Second && c.Hold.MaxHint <= time.Hour, "hold.max_hint", "%v is not within 1s–1h", c.Hold.MaxHint)
	check(c.Stop.For > 0, "stop.for", "%v is not positive", c.Stop.For)
	check(c.Breaker.MinVolume >= 1, "breaker.min_volume", "%d is under 1", c.Breaker.MinVolume)
	check(c.Breaker.FailureRate > 0 && c.Breaker.FailureRate <= 1, "breaker.failure_rate", "%v is not in (0, 1]", c.Breaker.FailureRate)
	check(c.Breaker.CloseSuccesses >= 1, "breaker.close_successes", "%d is under 1", c.Breaker.CloseSuccesses)
	check(c.Breaker.MinClients >= 1, "breaker.min_clients", "%d is under 1", c.Breaker.MinClients)
	check(c.Breaker.Window >= time.Second && c.Breaker.Window <= 10*time.Minute, "breaker.window", "%v is not within 1s–10m", c.Breaker.Window)
	check(c.Breaker.TripWindow >= 0 && c.Breaker.TripWindow <= c.Breaker.Window, "breaker.trip_window",
		"%v is not within 0–window (%v)", c.Breaker.TripWindow, c.Breaker.Window)
	check(c.Breaker.TripWindow == 0 || c.Breaker.TripRate > 0 && c.Breaker.TripRate <= 1, "breaker.trip_rate",
		"%v is not in (0, 1]", c.Breaker.TripRate)
	check(c.Breaker.OpenFor > 0, "breaker.open_for", "%v is not positive", c.Breaker.OpenFor)
	check(c.Breaker.MaxOpenFor >= c.Breaker.OpenFor, "breaker.max_open_for", "%v is below open_for %v", c.Breaker.MaxOpenFor, c.Breaker.OpenFor)
	check(c.Breaker.ProbeInterval > 0, "breaker.probe_interval", "%v is not positive", c.Breaker.ProbeInterval)
	check(c.Breaker.CloseAfter > 0, "breaker.close_after", "%v is not positive", c.Breaker.CloseAfter)
	check(c.Budget.Burst >= 1, "retry_budget.burst", "%v is under 1", c.Budget.Burst)
	check(c.Budget.Floor > 0, "retry_budget.floor", "%v is not positive", c.Budget.Floor)
	check(c.Budget.Ratio >= 0 && c.Budget.Ratio <= 10, "retry_budget.ratio", "%v is not in [0, 10]", c.Budget.Ratio)
	check(c.SlowStart.Window >= 0, "slow_start.window", "%v is negative", c.SlowStart.Window)
	check(c.SlowStart.From > 0 && c.SlowStart.From <= 1, "slow_start.from", "%v is not in (0, 1]", c.SlowStart.From)
	check(c.Pacing.Share >= 0 && c.Pacing.Share <= 1, "pacing.share", "%v is not in [0, 1]", c.Pacing.Share)
	check(c.Stream.TTL >= time.Second && c.Stream.TTL <= time.Hour, "stream.ttl", "%v is not within 1s–1h", c.Stream.TTL)
	check(c.Stream.AbandonAfter >= time.Second, "stream.abandon_after", "%v is under 1s", c.Stream.AbandonAfter)
	check(c.MaxBuckets >= 1, "max_buckets", "%d is under 1", c.MaxBuckets)
	check(c.ReportsPerSecond >= 0, "reports_per_second", "%v is negative", c.ReportsPerSecond)
	check(c.IdleAfter >= c.Breaker.MaxOpenFor && c.IdleAfter >= c.Stop.For, "idle_after", "%v is shorter than a stop or an open period", c.IdleAfter)
	for s, f := range c.Scopes {
		check(f.Provider, "scopes."+s.String(), "must include the provider")
	}
	for target, n := range c.MaxInFlight {
		check(n >= 1 && n <= maxInFlightCap, "max_in_flight."+target, "%d is not within 1–%d", n, maxInFlightCap)
		check(target != "" && target == strings.ToLower(target) && strings.Count(target, "/") <= 1, "max_in_flight."+target,
			"want provider or provider/model, in lower case")
	}
	return errors.Join(errs...)
}

// Switches turn each mechanism on or off for a profile's decisions.
type Switches struct{ Hold, Stop, Breaker, Budget bool }

// AllOn is every mechanism on, each profile's default.
var AllOn = Switches{Hold: true, Stop: true, Breaker: true, Budget: true}
