package fleetsim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/enums"
	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/policy"
	"github.com/policyd/policyd/internal/strategy"
)

// Policy is a retry policy under test: policyd (with or without fleet
// memory) or a model of an anchor's published defaults.
type Policy interface {
	Name() string
	// Start begins a run on env's clock.
	Start(env Env) Instance
}

// Env is what a run gives its policy: the virtual clock, and whether
// policyd is running (the restart scenario stops it).
type Env struct {
	Now      func() time.Time
	DaemonUp func() bool
	// Exchanges are the replicas' meeting places, one per replica, for
	// policyd with fleet memory; none: one replica.
	Exchanges []fleet.Exchange
}

// Advancer is an Instance with work of its own in time (policyd's timers,
// its streams' reports and pushes): the run calls Advance before each event.
type Advancer interface {
	Advance(now time.Time)
}

// Gater is a Process whose attempts pass a gate (docs/clients.md, "The
// fleet gate"): sent, sent after a wait, parked in the process until an
// assignment admits them, or given up.
type Gater interface {
	// Admit gates an attempt of call (retry: not the call's first) with
	// left before the call's deadline.
	Admit(now time.Time, call Call, left time.Duration, retry bool, r *rand.Rand) GateAnswer
	// Resume checks the process's parked call again.
	Resume(now time.Time, left time.Duration, r *rand.Rand) GateAnswer
	// Generation changes whenever an assignment reaches the process: its
	// parked calls are checked again then.
	Generation() uint64
}

// GateAnswer is a gate's word on an attempt: Send (after Wait), Park, or
// neither (the call is given up).
type GateAnswer struct {
	Send, Park bool
	Wait       time.Duration
}

// Instance is a policy in one run: the state every process shares (the
// daemon's fleet memory, for policyd with fleet memory).
type Instance interface {
	// NewProcess starts an agent process whose per-process state is fresh.
	NewProcess(id string) Process
}

// Process is one agent process's retry logic.
type Process interface {
	// Failed: the a.N-th attempt of a logical call failed. Retry after
	// delay, or give the call up.
	Failed(a *Attempt) (retry bool, delay time.Duration)
	// Succeeded: the a.N-th attempt of a logical call succeeded.
	Succeeded(a *Attempt)
	// Decisions is how many daemon RPCs (NextDelay decisions) the process
	// made; 0 for the anchors, which decide in process.
	Decisions() int64
}

// Call is what a gate knows of a logical call.
type Call struct {
	// Provider and Model are the call's target.
	Provider, Model string
	// Prompt is the call's input tokens.
	Prompt int64
	// Batch: the call is of the batch priority class.
	Batch bool
}

// Attempt is one finished attempt.
type Attempt struct {
	Now time.Time
	// N: attempts made in the logical call, this one included (1-based).
	N int
	// Elapsed since the call's first attempt was sent.
	Elapsed time.Duration
	Outcome *Outcome
	// Rand is the agent's jitter stream.
	Rand *rand.Rand
	// Deadline is the logical call's (DeadlineOf): every policy stops a
	// call that cannot finish by it.
	Deadline time.Time
	// Prompt is the call's input tokens.
	Prompt int64
}

// The policies' names.
const (
	PolicyFleet       = "fleet"
	PolicyFleetStream = "fleet-stream"
	PolicyStateless   = "stateless"
	PolicySDK         = "sdk"
	PolicyGeminiCLI   = "gemini-cli"
	PolicyAWSStandard = "aws-standard"
	PolicyGRPCA6      = "grpc-a6"
)

// PolicyNames are the policies in the order the reports list them.
var PolicyNames = []string{PolicyFleetStream, PolicyFleet, PolicyStateless, PolicySDK, PolicyGeminiCLI, PolicyAWSStandard, PolicyGRPCA6}

// NewPolicy returns the named policy.
func NewPolicy(name string) (Policy, error) {
	switch name {
	case PolicyFleet, PolicyStateless, PolicyFleetStream:
		p, err := SimPolicy()
		if err != nil {
			return nil, err
		}
		return &Policyd{name: name, pol: p, profile: SimProfile, fleet: name != PolicyStateless, stream: name == PolicyFleetStream}, nil
	case PolicyGeminiCLI:
		// policyd's agent_cli profile is its reproduction of gemini-cli's
		// retry loop (10 attempts, 5 s doubling to 30 s ±30 %, a server's
		// delay waited at least, +0–20 %): decided by the real code, alone.
		return &Policyd{name: name, pol: policy.Builtin(), profile: "agent_cli"}, nil
	case PolicySDK:
		return sdk{}, nil
	case PolicyAWSStandard:
		return awsStandard{}, nil
	case PolicyGRPCA6:
		return grpcA6{}, nil
	}
	return nil, fmt.Errorf("unknown policy %q (want %s)", name, strings.Join(PolicyNames, ", "))
}

// SimProfile is the profile the policyd policies decide with.
const SimProfile = "sim"

// SimPolicy is the built-in policy plus profile "sim": the `default`
// profile with its fallbacks off (the scenarios have nowhere to fall back
// to: "fallbacks are off unless a scenario says otherwise"). Its strategies
// are the built-in default's, read from the built-in policy, so the
// simulation follows any change to them.
func SimPolicy() (*policy.Policy, error) {
	def := policy.Builtin().Profiles[policy.DefaultProfile]
	var b strings.Builder
	fmt.Fprintf(&b, "profiles:\n  %s:\n    extends: %s\n    description: the default profile with fallbacks off (fleetsim)\n    strategies:\n", SimProfile, policy.DefaultProfile)
	types := make([]policydv1.FailureType, 0, len(def.Strategies))
	for t, s := range def.Strategies {
		if s.Fallback != strategy.FallbackNone {
			types = append(types, t)
		}
	}
	sort.Slice(types, func(i, j int) bool { return types[i] < types[j] })
	for _, t := range types {
		s := def.Strategies[t]
		s.Fallback, s.FallbackAfter = strategy.FallbackNone, 0
		fmt.Fprintf(&b, "      %s: %s\n", enums.Short(t), strategyYAML(s))
	}
	return policy.Parse([]byte(b.String()), "fleetsim", policy.Caps{})
}

// strategyYAML renders s in the policy file's flow syntax.
func strategyYAML(s strategy.Strategy) string {
	f := []string{fmt.Sprintf("retry: %t", s.Retry)}
	add := func(format string, args ...any) { f = append(f, fmt.Sprintf(format, args...)) }
	if s.Retry {
		add("max_attempts: %d", s.MaxAttempts)
	}
	add("backoff: %s", s.Backoff)
	add("initial_delay: %s", s.InitialDelay)
	if s.MaxDelay > 0 {
		add("max_delay: %s", s.MaxDelay)
	}
	if s.Multiplier > 0 {
		add("multiplier: %g", s.Multiplier)
	}
	if s.Step > 0 {
		add("step: %s", s.Step)
	}
	add("jitter: %s", s.Jitter)
	if s.JitterFraction > 0 {
		add("jitter_fraction: %g", s.JitterFraction)
	}
	if s.HonorRetryAfter {
		mode := "override"
		if s.RetryAfterMode == strategy.RetryAfterAtLeast {
			mode = "at_least"
		}
		add("honor_retry_after: true")
		add("retry_after_mode: %s", mode)
		add("retry_after_padding: %g", s.RetryAfterPadding)
		add("retry_after_jitter: %g", s.RetryAfterJitter)
		if s.RetryAfterCeiling > 0 {
			add("retry_after_ceiling: %s", s.RetryAfterCeiling)
		}
		add("retry_after_above_ceiling: %s", s.AboveCeiling)
	}
	add("fallback: none")
	return "{" + strings.Join(f, ", ") + "}"
}

// Policyd decides with policy.Decide: the real classifier, strategies and,
// for PolicyFleet, fleet memory shared by every process of the run.
type Policyd struct {
	name, profile string
	pol           *policy.Policy
	fleet, stream bool
}

// Name implements Policy.
func (p *Policyd) Name() string { return p.name }

// Start implements Policy.
func (p *Policyd) Start(env Env) Instance {
	in := &policydInstance{p: p, now: env.Now, up: env.DaemonUp, wasUp: true}
	if in.up == nil {
		in.up = func() bool { return true }
	}
	if p.fleet {
		in.exchanges = env.Exchanges
		in.startFleets()
	}
	if p.stream {
		return &streamInstance{policydInstance: in}
	}
	return in
}

type policydInstance struct {
	p   *Policyd
	now func() time.Time
	// fleets are the replicas' fleet memories (one without Exchanges),
	// their syncers and meeting places; calls go to them in turn, as
	// through a per-call balancer.
	fleets    []*fleet.Fleet
	syncers   []*fleet.Syncer
	exchanges []fleet.Exchange
	next      int
	syncAt    time.Time
	pushes    int64
	up        func() bool
	wasUp     bool
	// effects the fleets before a restart changed
	effects map[string]int64
}

// startFleets starts the replicas' fleet memories, with no state of their
// own (a shared fleet's replicas read what the others left).
func (in *policydInstance) startFleets() {
	in.fleets, in.syncers = nil, nil
	if len(in.exchanges) == 0 {
		in.fleets = []*fleet.Fleet{fleet.New(in.p.pol.Fleet, fleet.WithClock(in.now))}
		return
	}
	for i, ex := range in.exchanges {
		f := fleet.New(in.p.pol.Fleet, fleet.WithClock(in.now), fleet.WithReplica(fmt.Sprintf("replica-%d", i+1)))
		in.fleets = append(in.fleets, f)
		in.syncers = append(in.syncers, fleet.NewSyncer(f, ex))
	}
}

// Fleet is the run's first replica's fleet memory (nil without it).
func (in *policydInstance) Fleet() *fleet.Fleet {
	if len(in.fleets) == 0 {
		return nil
	}
	return in.fleets[0]
}

// pick is the replica the next call goes to.
func (in *policydInstance) pick() *fleet.Fleet {
	if len(in.fleets) == 0 {
		return nil
	}
	f := in.fleets[in.next%len(in.fleets)]
	in.next++
	return f
}

// syncEvery: the replicas' syncers run every 100 ms of virtual time, and
// read at once after another replica pushed (the daemon's LISTEN/NOTIFY,
// a few milliseconds on a real database).
const syncEvery = 20 * time.Millisecond

// Advance implements Advancer: the replicas' timers and syncers.
func (in *policydInstance) Advance(now time.Time) {
	in.checkRestart()
	if len(in.syncers) == 0 || !in.up() || now.Sub(in.syncAt) < syncEvery {
		return
	}
	in.syncAt = now
	in.sync()
}

func (in *policydInstance) sync() {
	woken := false
	for round := 0; round < 2; round++ {
		before := in.pushes
		for i, s := range in.syncers {
			in.fleets[i].Tick()
			if err := s.Step(context.Background(), woken); err != nil {
				panic(fmt.Sprintf("fleetsim: replica %d: %v", i+1, err))
			}
		}
		in.pushes = 0
		for _, s := range in.syncers {
			st := s.Stats()
			in.pushes += st.Pushes
		}
		if in.pushes == before {
			return
		}
		woken = true // the others read what was pushed
	}
}

// Effects counts what the fleet changed, by effect, over every daemon the
// run started.
func (in *policydInstance) Effects() map[string]int64 {
	m := map[string]int64{}
	for k, v := range in.effects {
		m[k] += v
	}
	for _, f := range in.fleets {
		for k, v := range f.Effects() {
			m[k] += v
		}
	}
	return m
}

// checkRestart starts a fresh daemon (no state) when policyd comes back.
func (in *policydInstance) checkRestart() bool {
	up := in.up()
	restarted := up && !in.wasUp
	in.wasUp = up
	if restarted && len(in.fleets) > 0 {
		if in.effects == nil {
			in.effects = map[string]int64{}
		}
		for _, f := range in.fleets {
			for k, v := range f.Effects() {
				in.effects[k] += v
			}
		}
		in.startFleets()
	}
	return restarted
}

func (in *policydInstance) NewProcess(id string) Process {
	return &policydProcess{in: in, id: id}
}

type policydProcess struct {
	in        *policydInstance
	id        string
	decisions int64
}

func (pp *policydProcess) Failed(a *Attempt) (bool, time.Duration) {
	pp.in.checkRestart()
	if !pp.in.up() {
		return failOpen(a) // the client cannot reach policyd
	}
	p := pp.in.p
	req := &policydv1.NextDelayRequest{
		Failure:  a.Outcome.Failure,
		Attempt:  int32(a.N),
		Profile:  p.profile,
		Elapsed:  durationpb.New(a.Elapsed),
		ClientId: pp.id,
		Deadline: timestamppb.New(a.Deadline),
	}
	pp.decisions++
	d := p.pol.Decide(req, policy.Call{Now: a.Now, Rand: a.Rand, Profile: policy.ProfileName(req.GetProfile()), Fleet: pp.in.pick(), ClientID: pp.id})
	if d.GetAction() != policydv1.Action_ACTION_RETRY {
		return false, 0 // a stop, or a fallback with nowhere to go
	}
	return true, d.GetDelay().AsDuration()
}

func (pp *policydProcess) Succeeded(*Attempt) {}
func (pp *policydProcess) Decisions() int64   { return pp.decisions }

// failOpen is the clients' fail-open policy (docs/clients.md): 3 attempts,
// 1 s doubling up to 30 s with full jitter, at least the server's hint, a
// hint above 60 s stops. The scenarios' failures (503, 429) are all
// retried by it.
func failOpen(a *Attempt) (bool, time.Duration) {
	const attempts, ceiling = 3, 60 * time.Second
	if a.N >= attempts || a.Outcome.Hint > ceiling {
		return false, 0
	}
	d := time.Duration(a.Rand.Float64() * float64(min(30*time.Second, time.Second<<(a.N-1))))
	return true, max(d, a.Outcome.Hint)
}

// noRPC is the anchors' Decisions: they decide in process.
type noRPC struct{}

func (noRPC) Decisions() int64 { return 0 }

// sdk models the OpenAI and Anthropic SDKs (both generated by Stainless;
// openai-python _base_client.py, anthropic-sdk-python the same):
// max_retries 2 (3 attempts); 408, 409, 429 and 5xx are retried; a
// retry-after-ms or retry-after of more than 0 and at most 60 s is waited
// exactly, else the n-th retry waits min(0.5 s × 2^(n-1), 8 s) ×
// (1 − 0.25 × random()). Nothing is shared between calls or processes.
type sdk struct{}

const (
	sdkMaxRetries   = 2
	sdkInitialDelay = 500 * time.Millisecond
	sdkMaxDelay     = 8 * time.Second
	sdkMaxHint      = 60 * time.Second
)

func (sdk) Name() string                { return PolicySDK }
func (s sdk) Start(Env) Instance        { return s }
func (s sdk) NewProcess(string) Process { return sdkProcess{} }

type sdkProcess struct{ noRPC }

func (sdkProcess) Failed(a *Attempt) (bool, time.Duration) {
	if a.N > sdkMaxRetries {
		return false, 0
	}
	if h := a.Outcome.Hint; h > 0 && h <= sdkMaxHint {
		return true, h
	}
	d := min(float64(sdkInitialDelay)*math.Pow(2, float64(a.N-1)), float64(sdkMaxDelay))
	return true, time.Duration(d * (1 - 0.25*a.Rand.Float64()))
}

func (sdkProcess) Succeeded(*Attempt) {}

// awsStandard models the AWS SDKs' standard retry mode (botocore
// retries/standard.py, the AWS SDKs and Tools reference guide): 3 attempts;
// the n-th retry waits random() × min(1 s × 2^(n-1), 20 s) (full jitter;
// Retry-After is not read); a per-process retry quota of 500 tokens, where a
// retry costs 5 (10 after a timeout; none here), a successful call refunds
// its retry's cost or, when it needed no retry, adds 1 (capped at 500); no
// retry when the quota is below the cost. (The 2026 rules price a transient
// retry at 14 and a throttle at 5; the classic 5 is used.)
type awsStandard struct{}

const (
	awsMaxAttempts = 3
	awsBase        = time.Second
	awsMaxBackoff  = 20 * time.Second
	awsQuota       = 500
	awsRetryCost   = 5
	awsNoRetryInc  = 1
)

func (awsStandard) Name() string              { return PolicyAWSStandard }
func (a awsStandard) Start(Env) Instance      { return a }
func (awsStandard) NewProcess(string) Process { return &awsProcess{quota: awsQuota} }

type awsProcess struct {
	noRPC
	quota    int
	acquired int // the cost the current call's last retry took
}

func (p *awsProcess) Failed(a *Attempt) (bool, time.Duration) {
	if a.N == 1 {
		p.acquired = 0
	}
	if a.N >= awsMaxAttempts || p.quota < awsRetryCost {
		return false, 0
	}
	p.quota -= awsRetryCost
	p.acquired = awsRetryCost
	d := a.Rand.Float64() * min(float64(awsBase)*math.Pow(2, float64(a.N-1)), float64(awsMaxBackoff))
	return true, time.Duration(d)
}

func (p *awsProcess) Succeeded(a *Attempt) {
	if a.N == 1 {
		p.acquired = 0
	}
	if p.acquired > 0 {
		p.quota += p.acquired
	} else {
		p.quota += awsNoRetryInc
	}
	p.quota = min(p.quota, awsQuota)
	p.acquired = 0
}

// grpcA6 models gRPC's retry design (gRFC A6) with retry throttling as its
// example configures it: maxTokens 10, tokenRatio 0.1, per process (per
// channel). The token count starts at 10; every failed attempt takes 1,
// every success gives back 0.1 (up to 10); no retry while the count is at
// or below maxTokens/2. maxAttempts 5 (A6's upper limit). A6 prescribes the
// shape of the backoff (the n-th retry after random(0, min(initial ×
// multiplier^(n-1), max))) but no values; the values are gRPC's documented
// connection backoff (doc/connection-backoff.md): initial 1 s, multiplier
// 1.6, max 120 s. HTTP Retry-After is not read (only grpc-retry-pushback-ms).
type grpcA6 struct{}

const (
	a6MaxAttempts = 5
	a6MaxTokens   = 10.0
	a6TokenRatio  = 0.1
	a6Initial     = time.Second
	a6Multiplier  = 1.6
	a6MaxBackoff  = 120 * time.Second
)

func (grpcA6) Name() string              { return PolicyGRPCA6 }
func (g grpcA6) Start(Env) Instance      { return g }
func (grpcA6) NewProcess(string) Process { return &a6Process{tokens: a6MaxTokens} }

type a6Process struct {
	noRPC
	tokens float64
}

func (p *a6Process) Failed(a *Attempt) (bool, time.Duration) {
	p.tokens = max(0, p.tokens-1)
	if a.N >= a6MaxAttempts || p.tokens <= a6MaxTokens/2 {
		return false, 0
	}
	d := a.Rand.Float64() * min(float64(a6Initial)*math.Pow(a6Multiplier, float64(a.N-1)), float64(a6MaxBackoff))
	return true, time.Duration(d)
}

func (p *a6Process) Succeeded(*Attempt) { p.tokens = min(a6MaxTokens, p.tokens+a6TokenRatio) }
