package fleetsim

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/policyd/policyd/internal/fleet"
)

// Config is one run.
type Config struct {
	Scenario Scenario
	Policy   Policy
	// Agents in the closed loop.
	Agents int
	// Life is how many logical calls a process makes before it is replaced
	// by a fresh one (a CLI invocation); 0: one process per agent for the
	// whole run.
	Life int
	Seed uint64
	// ThinkMean is the mean of the exponential think time (default 10 s).
	ThinkMean time.Duration
	// Replicas of policyd (default 1), behind a per-call balancer; more
	// than one share their fleet through Exchanges.
	Replicas int
	// Exchanges returns n meeting places on a clean slate (an empty
	// database) for one run, and a func that closes them.
	Exchanges func(n int) ([]fleet.Exchange, func(), error)
	// NoReference skips the run without the incident that herd_ref and
	// unaffected are read from (they are NaN then): half the cost, for
	// checks that read neither.
	NoReference bool
}

// Epoch is the virtual clock's zero.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Streams of the run's seed: each agent draws its think times, latencies and
// jitter from three streams of its own, so that its draws do not depend on
// what the other agents do (and a policy's jitter does not shift the think
// times: every policy meets the same agents, the same latencies).
const (
	streamThink = iota
	streamLatency
	streamJitter
	streamCount
)

func stream(seed uint64, agent, kind int) *rand.Rand {
	return rand.New(rand.NewPCG(seed, uint64(agent)*streamCount+uint64(kind)+1))
}

// promptStream is agent's stream of prompt lengths: apart from the three
// above, so that the other scenarios' draws stay as they were.
func promptStream(seed uint64, agent int) *rand.Rand {
	return rand.New(rand.NewPCG(seed^0x70c3e5, uint64(agent)))
}

type eventKind uint8

const (
	evCall    eventKind = iota // think ends: a logical call begins
	evAttempt                  // an attempt is sent (a gate's wait ended)
	evAnswer                   // an attempt's answer arrives
	evSend                     // a retry or a gate's wait ends: the attempt goes through the gate again
	evTick                     // the daemon's timers and the parked calls' rechecks run
)

// tickEvery is how often the run looks at the daemon's timers and the
// parked calls when no agent's event comes sooner: with every call
// parked, nothing else happens.
const simTick = 50 * time.Millisecond

type event struct {
	at    time.Duration
	seq   uint64
	agent int32
	kind  eventKind
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

type agent struct {
	idx                int
	model              string
	think, lat, jit    *rand.Rand
	prompts            *rand.Rand
	prompt             int64 // the logical call's input tokens
	output             int64 // and its output tokens (the output scenario's)
	batch              bool  // its calls are of the batch class
	proc               Process
	procN, callsInProc int
	callStart          time.Duration // the logical call's start
	deadline           time.Duration // callStart + the agent's deadline
	attempts           int
	// A parked call: the assignment generation it last saw, and when it is
	// checked again without one.
	parked          bool
	parkGen         uint64
	parkCheck       time.Duration
	outcome         Outcome
	decisionsAtCall int64
}

type run struct {
	cfg    Config
	now    time.Duration
	seq    uint64
	events eventHeap
	prov   *provider
	inst   Instance
	agents []*agent
	rec    *recorder
	// parked calls, in the order they parked
	parked []*agent
}

// Run simulates cfg and returns its measurements.
func Run(cfg Config) (*Result, error) {
	if cfg.Agents < 1 {
		return nil, fmt.Errorf("agents: %d is under 1", cfg.Agents)
	}
	if cfg.Life < 0 {
		return nil, fmt.Errorf("life: %d is negative", cfg.Life)
	}
	if cfg.ThinkMean <= 0 {
		cfg.ThinkMean = 10 * time.Second
	}
	if cfg.Replicas < 1 {
		cfg.Replicas = 1
	}
	env := Env{}
	if cfg.Replicas > 1 {
		if cfg.Exchanges == nil {
			return nil, fmt.Errorf("replicas: %d replicas need Exchanges to share their fleet", cfg.Replicas)
		}
		exs, closeAll, err := cfg.Exchanges(cfg.Replicas)
		if err != nil {
			return nil, fmt.Errorf("replicas: %w", err)
		}
		defer closeAll()
		env.Exchanges = exs
	}
	r := &run{cfg: cfg, prov: newProvider(cfg.Scenario), rec: newRecorder(cfg.Scenario)}
	env.Now, env.DaemonUp = r.clock, r.daemonUp
	r.inst = cfg.Policy.Start(env)
	for i := range cfg.Agents {
		a := &agent{idx: i, model: cfg.Scenario.modelOf(i), deadline: DeadlineOf(i),
			think: stream(cfg.Seed, i, streamThink), lat: stream(cfg.Seed, i, streamLatency), jit: stream(cfg.Seed, i, streamJitter),
			prompts: promptStream(cfg.Seed, i), batch: cfg.Scenario.batch(i)}
		r.agents = append(r.agents, a)
		r.newProcess(a)
		r.schedule(r.thinkTime(a), a, evCall)
	}
	if _, ok := r.inst.(Advancer); ok {
		r.seq++
		heap.Push(&r.events, event{at: simTick, seq: r.seq, agent: -1, kind: evTick})
	}
	for len(r.events) > 0 {
		e := heap.Pop(&r.events).(event)
		if e.at >= cfg.Scenario.Duration {
			break
		}
		r.now = e.at
		if adv, ok := r.inst.(Advancer); ok {
			adv.Advance(r.clock())
		}
		r.resumeParked()
		if e.kind == evTick {
			r.seq++
			heap.Push(&r.events, event{at: r.now + simTick, seq: r.seq, agent: -1, kind: evTick})
			continue
		}
		a := r.agents[e.agent]
		switch e.kind {
		case evCall:
			r.call(a)
		case evAttempt:
			r.attempt(a)
		case evSend:
			r.send(a)
		case evAnswer:
			r.answer(a)
		}
	}
	res := r.rec.result(r)
	res.HerdRef = math.NaN()
	if sc := cfg.Scenario; !sc.healthy && !cfg.NoReference {
		// The same agents, with the same draws, without the incident: the
		// unaffected model's goodput is measured against it (any difference
		// is spillover), and its herd statistic is the noise floor (the
		// busiest second a healthy fleet has anyway).
		ref := cfg
		ref.Scenario = sc.reference()
		rr, err := Run(ref)
		if err != nil {
			return nil, err
		}
		res.HerdRef = rr.Herd
		if sc.Name == Classes {
			res.ClassP95Ref = rr.ClassP95[0]
		}
		if sc.Name == Partial {
			res.Unaffected = float64(sum(res.otherGood, sc.Start, sc.End)) / float64(max(sum(rr.otherGood, sc.Start, sc.End), 1))
		}
	}
	return res, nil
}

func (r *run) clock() time.Time { return Epoch.Add(r.now) }

// daemonUp says whether policyd is running (the restart scenario stops it).
func (r *run) daemonUp() bool {
	sc := r.cfg.Scenario
	return sc.healthy || !(sc.DownFrom <= r.now && r.now < sc.DownTo)
}

func (r *run) schedule(after time.Duration, a *agent, k eventKind) {
	r.seq++
	heap.Push(&r.events, event{at: r.now + after, seq: r.seq, agent: int32(a.idx), kind: k})
}

func (r *run) thinkTime(a *agent) time.Duration {
	return time.Duration(a.think.ExpFloat64() * float64(r.cfg.ThinkMean))
}

func (r *run) newProcess(a *agent) {
	a.procN++
	a.callsInProc = 0
	a.proc = r.inst.NewProcess(fmt.Sprintf("agent-%03d.%d", a.idx, a.procN))
}

// call begins a logical call, in a fresh process when the old one has made
// its Life calls.
func (r *run) call(a *agent) {
	if r.cfg.Life > 0 && a.callsInProc >= r.cfg.Life {
		r.newProcess(a)
	}
	a.callsInProc++
	a.callStart, a.attempts = r.now, 0
	a.prompt = PromptTokens(a.prompts)
	if r.cfg.Scenario.Name == Output {
		a.output = OutputTokens(a.prompts)
	}
	a.decisionsAtCall = a.proc.Decisions()
	r.rec.callStarted(r.now, a.model)
	r.send(a)
}

// send sends the call's next attempt, through the process's gate when it
// has one: at once, after the gate's wait, parked, or not at all.
func (r *run) send(a *agent) {
	if r.now >= a.callStart+a.deadline {
		r.done(a, false)
		return
	}
	if g, ok := a.proc.(Gater); ok {
		ans := g.Admit(r.clock(), Call{Provider: r.cfg.Scenario.provider(), Model: a.model, Prompt: a.prompt, Batch: a.batch}, a.callStart+a.deadline-r.now, a.attempts > 0, a.jit)
		if r.gated(a, g, ans) {
			return
		}
	}
	r.attempt(a)
}

// gated acts on a gate's answer; false: send the attempt now.
func (r *run) gated(a *agent, g Gater, ans GateAnswer) bool {
	switch {
	case ans.Park:
		if !a.parked {
			a.parked = true
			r.parked = append(r.parked, a)
			r.rec.park(r.now, 1)
		}
		a.parkGen, a.parkCheck = g.Generation(), r.now+parkRecheck
		return true
	case !ans.Send:
		if a.attempts == 0 {
			r.rec.shed(r.now, a.model)
		}
		r.done(a, false)
		return true
	case ans.Wait > 0:
		r.scheduleAttempt(a, ans.Wait, evAttempt)
		return true
	}
	return false
}

// scheduleAttempt sends the attempt after wait (evAttempt: as it is;
// evSend: through the gate), when the deadline allows.
func (r *run) scheduleAttempt(a *agent, wait time.Duration, k eventKind) {
	if r.now+wait >= a.callStart+a.deadline {
		r.done(a, false)
		return
	}
	r.seq++
	heap.Push(&r.events, event{at: r.now + wait, seq: r.seq, agent: int32(a.idx), kind: k})
}

// parkRecheck is how often a parked call is checked without a new
// assignment (refgate.Recheck).
const parkRecheck = time.Second

// resumeParked checks the parked calls whose process received an
// assignment, or whose recheck is due, earliest deadline first.
func (r *run) resumeParked() {
	if len(r.parked) == 0 {
		return
	}
	var due []*agent
	kept := r.parked[:0]
	for _, a := range r.parked {
		g := a.proc.(Gater)
		if g.Generation() != a.parkGen || r.now >= a.parkCheck || r.now >= a.callStart+a.deadline {
			due = append(due, a)
		}
		kept = append(kept, a)
	}
	r.parked = kept
	if len(due) == 0 {
		return
	}
	sort.SliceStable(due, func(i, j int) bool { return due[i].callStart+due[i].deadline < due[j].callStart+due[j].deadline })
	for _, a := range due {
		g := a.proc.(Gater)
		ans := g.Resume(r.clock(), a.callStart+a.deadline-r.now, a.jit)
		if ans.Park && r.now < a.callStart+a.deadline {
			a.parkGen, a.parkCheck = g.Generation(), r.now+parkRecheck
			continue
		}
		a.parked = false
		r.unpark(a)
		if !ans.Park && r.gated(a, g, ans) {
			continue
		}
		if ans.Park { // its deadline passed
			r.done(a, false)
			continue
		}
		r.attempt(a)
	}
}

func (r *run) unpark(a *agent) {
	for i, b := range r.parked {
		if b == a {
			r.parked = append(r.parked[:i], r.parked[i+1:]...)
			break
		}
	}
	r.rec.park(r.now, -1)
}

func (r *run) attempt(a *agent) {
	a.attempts++
	a.outcome = r.prov.attempt(r.now, a.model, a.prompt, a.output, a.lat)
	r.rec.attempt(r.now, a.model, a.prompt, &a.outcome)
	r.schedule(a.outcome.Latency, a, evAnswer)
}

// done ends the logical call and starts the agent's think time.
func (r *run) done(a *agent, ok bool) {
	r.rec.callDone(r.now, a.model, a.batch, ok, a.attempts, a.proc.Decisions()-a.decisionsAtCall, r.now-a.callStart)
	r.schedule(r.thinkTime(a), a, evCall)
}

func (r *run) answer(a *agent) {
	at := &Attempt{Now: r.clock(), N: a.attempts, Elapsed: r.now - a.callStart, Outcome: &a.outcome, Rand: a.jit,
		Deadline: Epoch.Add(a.callStart + a.deadline), Prompt: a.prompt}
	if a.outcome.OK && r.now <= a.callStart+a.deadline {
		a.proc.Succeeded(at)
		r.done(a, true)
		return
	}
	if a.outcome.OK { // it came back after the caller had given up
		a.proc.Succeeded(at)
		r.done(a, false)
		return
	}
	retry, delay := a.proc.Failed(at)
	if retry {
		r.scheduleAttempt(a, max(delay, 0), evSend)
		return
	}
	r.done(a, false)
}
