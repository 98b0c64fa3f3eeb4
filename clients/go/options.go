package policyd

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"time"

	"google.golang.org/grpc"
)

// DefaultAddr is the daemon address Dial uses when given none and
// POLICYD_ADDR is unset: `make run`'s default listen address.
const DefaultAddr = "127.0.0.1:7433"

// EnvAddr names the environment variable holding the daemon's address,
// [http://|https://]host[:port] (see Dial).
const EnvAddr = "POLICYD_ADDR"

// DefaultDaemonTimeout bounds every RPC to policyd unless WithDaemonTimeout
// says otherwise: long enough for a journaled NextDelay (the daemon waits up
// to 250 ms for its commit), short enough that a hung daemon costs an agent
// little before the client fails open.
const DefaultDaemonTimeout = time.Second

// Option configures a Client.
type Option func(*config)

type config struct {
	profile       string
	journal       bool
	agent         string
	daemonTimeout time.Duration
	fallback      FallbackFunc
	logger        *slog.Logger
	clock         Clock
	rand          Rand
	failOpen      FailOpenPolicy
	onDecision    DecisionFunc
	dialOptions   []grpc.DialOption
	clientID      string
	fleetGate     bool
	gateGrace     time.Duration
	parkLimit     time.Duration // 0: DefaultParkLimit; negative: parking off

	// Authentication and TLS (auth.go); the *Set fields say an option gave
	// the value, else Dial reads the environment.
	token                  string
	tokenSet               bool
	tls                    bool
	tlsCA, tlsCert, tlsKey string
	tlsCASet, tlsCertSet   bool
}

func newConfig(opts []Option) config {
	cfg := config{
		daemonTimeout: DefaultDaemonTimeout,
		logger:        slog.Default(),
		clock:         systemClock{},
		rand:          systemRand{},
		failOpen:      DefaultFailOpenPolicy,
		agent:         defaultAgent(os.Args[0]),
		clientID:      newClientID(),
		fleetGate:     true,
		gateGrace:     DefaultGateGrace,
	}
	for _, o := range opts {
		o(&cfg)
	}
	return cfg
}

// WithClientID names this client process to policyd (at most 128 bytes;
// default: the host name, the process id and a random suffix). The fleet's
// circuit breakers count distinct clients, so two processes must not share
// one.
func WithClientID(id string) Option {
	return func(c *config) {
		if id != "" {
			c.clientID = clip(id, maxLabelBytes)
		}
	}
}

// newClientID is unique per Client: host, pid and 8 random hex digits.
func newClientID() string {
	host, _ := os.Hostname()
	return clip(fmt.Sprintf("%s/%d/%08x", host, os.Getpid(), rand.Uint32()), maxLabelBytes)
}

// WithProfile makes name the profile of calls that name none (default:
// policyd's "default" profile, for LLM provider calls). Built in are
// "default", "agent_cli", "task_runner" and "web_fetch".
func WithProfile(name string) Option { return func(c *config) { c.profile = name } }

// WithJournal turns journaling on or off for every call (default off; a
// Call with a ContextID is journaled regardless). A journaled call that
// fails at least once is a RetryContext in policyd's journal: its
// attempts, the decisions, and an error report when it fails for good. A
// call that succeeds at once records nothing.
func WithJournal(on bool) Option { return func(c *config) { c.journal = on } }

// WithAgent names the agent in journaled contexts (default: the program's
// file name without its extension, as in every client; docs/clients.md).
func WithAgent(name string) Option { return func(c *config) { c.agent = name } }

// WithDaemonTimeout bounds each RPC to policyd (default
// DefaultDaemonTimeout). When policyd does not answer in time the client
// decides with its fail-open policy instead.
func WithDaemonTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.daemonTimeout = d
		}
	}
}

// WithFallback makes fn the fallback of calls that have none (default:
// none, and a FALL_BACK decision stops the call like STOP does).
func WithFallback(fn FallbackFunc) Option { return func(c *config) { c.fallback = fn } }

// WithLogger makes l the client's logger (default slog.Default()). The
// client warns once per outage when it fails open, and logs every decision
// at debug level.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l != nil {
			c.logger = l
		}
	}
}

// WithClock makes clock the client's time source (default the system
// clock): tests inject one that fires timers at once to run long retry
// sequences without sleeping.
func WithClock(clock Clock) Option {
	return func(c *config) {
		if clock != nil {
			c.clock = clock
		}
	}
}

// WithRand makes r the client's jitter source (default math/rand/v2's
// global source): the fail-open policy's delays, the gate's draws, and the
// fleet stream's report interval and reconnect backoff. r must be safe for concurrent use if the
// client is.
func WithRand(r Rand) Option {
	return func(c *config) {
		if r != nil {
			c.rand = r
		}
	}
}

// WithFailOpenPolicy replaces DefaultFailOpenPolicy, the policy used while
// policyd cannot be asked.
func WithFailOpenPolicy(p FailOpenPolicy) Option { return func(c *config) { c.failOpen = p } }

// DecisionFunc observes every decision: the failed attempt's number, its
// error and what was decided — by policyd, by the fail-open policy, or by
// the fleet gate (Strategy "fleet-gate": a stop, a fallback, a park as it
// starts and as it ends; attempt 0 and no error before the first attempt).
// It runs on the calling goroutine before the wait and must not block.
// OpenTelemetry records the same decisions (docs/clients.md, "Tracing and
// metrics"), a park's start excepted.
type DecisionFunc func(attempt int, err error, d Decision)

// WithOnDecision makes fn observe every decision, e.g. for metrics of
// your own.
func WithOnDecision(fn DecisionFunc) Option { return func(c *config) { c.onDecision = fn } }

// WithDialOptions adds gRPC dial options for Dial (default: plaintext, as
// policyd serves on loopback without TLS; WithTLS, WithClientCert and
// WithToken cover policyd's own TLS and tokens).
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(c *config) { c.dialOptions = append(c.dialOptions, opts...) }
}

// WithFleetGate turns the fleet gate on or off (default on). On, every
// first attempt of a call that names a provider is checked against the
// assignments policyd pushes down a background Coordinate stream (a map
// lookup, no RPC): it is sent, waits out a shared hold, falls back or
// stops while the fleet's breaker is open, the key is stopped or the
// fleet sheds load; and the client reports its counts up the stream about
// once a second. Off, first attempts always go and no stream is opened.
func WithFleetGate(on bool) Option { return func(c *config) { c.fleetGate = on } }

// WithParkLimit bounds how long a call without a deadline may wait parked
// in the fleet gate (default DefaultParkLimit, 2 minutes); a call with a
// deadline parks until the deadline can no longer be met. d ≤ 0 turns
// parking off: a call the fleet would park stops (or falls back) at once.
func WithParkLimit(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			d = -1
		}
		c.parkLimit = d
	}
}

// WithGateGrace sets how long the gate keeps an assignment past its time
// to live when policyd stops refreshing it (default DefaultGateGrace,
// 10 s); after that every first attempt goes, and the process's own
// budget for the target limits only the fail-open policy's retries (gRPC
// A6's throttling: 10 tokens, a failure takes 1, a success gives 0.1, time
// 0.1 a second, retries above 5).
func WithGateGrace(d time.Duration) Option {
	return func(c *config) {
		if d >= 0 {
			c.gateGrace = d
		}
	}
}
