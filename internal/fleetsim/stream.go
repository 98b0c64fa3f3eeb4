package fleetsim

import (
	"math/rand/v2"
	"time"

	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/refgate"
)

// The fleet-stream policy: fleet memory with each process's Coordinate
// stream and gate, as the clients implement them (docs/clients.md, "The
// fleet gate"; the gate is refgate.Gate, which the clients' shared vectors
// pin). The stream is modelled without latency: a report or a push is
// applied when it is sent, which on a local daemon is within a
// millisecond. What the model keeps from the wire is its timing: reports
// about once a second after activity, pushes on the fleet's transitions,
// refreshes before the TTL, and nothing at all while policyd is down
// (then reconnects with the clients' backoff, 1 s doubling to 30 s, full
// jitter).

// reportEvery is the clients' report interval.
const reportEvery = time.Second

// tickEvery is how often the daemon's streams re-evaluate their
// assignments (internal/server).
const tickEvery = 250 * time.Millisecond

// loopEvery is how often Advance looks at the processes' timers.
const loopEvery = 20 * time.Millisecond

// reconnectMax is the clients' longest reconnect backoff.
const reconnectMax = 30 * time.Second

type streamInstance struct {
	*policydInstance
	procs   []*streamProcess
	changes []<-chan struct{} // each replica's
	// msgs counts stream messages, up and down.
	msgs   int64
	loopAt time.Time
	// what the processes that ended counted
	deadSeconds        float64
	deadOwn, deadBound int64
}

func (in *streamInstance) NewProcess(id string) Process {
	now := in.now()
	p := &streamProcess{policydProcess: policydProcess{in: in.policydInstance, id: id}, sin: in, gate: refgate.New(), born: now,
		replica: len(in.procs) % len(in.fleets),
		jit:     rand.New(rand.NewPCG(uint64(len(in.procs)), 0x57ea)), connected: in.up()}
	// The process it replaces (a CLI invocation's end) closes its stream.
	for i, q := range in.procs {
		if q.agent == id[:len(id)-len(suffix(id))] {
			in.deadSeconds += now.Sub(q.born).Seconds()
			in.deadOwn += q.gate.OwnAdmitted
			in.deadBound += q.ownBound
			in.procs[i] = p
			p.agent, p.replica = q.agent, q.replica
			return p
		}
	}
	p.agent = id[:len(id)-len(suffix(id))]
	in.procs = append(in.procs, p)
	return p
}

// suffix is the ".N" of a process id "agent-007.N".
func suffix(id string) string {
	for i := len(id) - 1; i >= 0; i-- {
		if id[i] == '.' {
			return id[i:]
		}
	}
	return ""
}

// Advance runs what happens between the agents' events: the daemon's
// restart, its timers, reconnects, due reports, pushes and refreshes.
func (in *streamInstance) Advance(now time.Time) {
	if in.checkRestart() {
		in.changes = nil
	}
	if !in.up() {
		for _, p := range in.procs {
			p.disconnect(now)
		}
		return
	}
	in.policydInstance.Advance(now)
	pushed := false
	if in.changes == nil {
		in.changes = make([]<-chan struct{}, len(in.fleets))
	}
	for i, f := range in.fleets {
		f.Tick()
		if in.changes[i] != nil {
			select {
			case <-in.changes[i]:
				pushed = true
				in.changes[i] = nil
			default:
			}
		}
		if in.changes[i] == nil {
			in.changes[i] = f.NextTransition()
		}
	}
	// The processes' timers (reports, the daemon's re-evaluations) are
	// looked at every loopEvery of virtual time, and at once on a push:
	// with 2,000 agents, events come every millisecond or two.
	if !pushed && now.Sub(in.loopAt) < loopEvery {
		return
	}
	in.loopAt = now
	ttl := in.fleets[0].Config().Stream.TTL
	for _, p := range in.procs {
		if !p.connected {
			if now.Before(p.nextTry) {
				continue
			}
			p.connected = true // and subscribes again at its next report
			if p.pending() {
				p.report(now)
			}
			continue
		}
		if p.pending() && !now.Before(p.reportAt) {
			p.report(now)
			continue
		}
		// The daemon's stream re-evaluates each assignment on every change
		// and every tickEvery (a slow start's rising share, a freed probe
		// permit), and sends the ones that differ or are due a refresh.
		if p.subscribed && (pushed || now.Sub(p.evalAt) >= tickEvery) {
			p.evalAt = now
			p.deliver(now, now.Sub(p.sentAt) >= ttl*2/3)
		}
	}
}

// streamStats: stream messages, process-seconds alive, and the first
// attempts the processes' own budgets admitted against what they allow.
func (in *streamInstance) streamStats() (msgs, procSeconds float64, own, bound int64) {
	now := in.now()
	for _, p := range in.procs {
		own += p.gate.OwnAdmitted
		bound += p.ownBound
	}
	for _, p := range in.procs {
		procSeconds += now.Sub(p.born).Seconds()
	}
	return float64(in.msgs), procSeconds + in.deadSeconds, own + in.deadOwn, bound + in.deadBound
}

type streamProcess struct {
	policydProcess
	sin       *streamInstance
	agent     string
	replica   int // the replica its stream goes to
	gate      *refgate.Gate
	jit       *rand.Rand
	born      time.Time
	modelName string
	provider  string // its target's, learnt with the model

	// The counts of the current report interval.
	admitted, shed, succeeded, failed, retries int64
	parkedNew, released                        int64
	firstTokens, retryTokens                   int64 // input tokens estimated: first attempts at their first check, retries
	usedTokens, usedEstimates                  int64 // of the successes: input tokens the provider counted, and their estimates
	outputTokens, outputCalls                  int64 // of the successes: output tokens their usage reported, and how many
	headers                                    map[string]string
	prompt                                     int64 // the current call's input tokens
	class                                      refgate.Class
	batchFirst                                 int64 // batch first attempts at their first check
	reportAt                                   time.Time

	connected, subscribed bool
	nextTry               time.Time
	backoff               time.Duration
	sent                  fleet.Assignment
	sentAt, evalAt        time.Time
	gen                   uint64 // assignments received
	// the call the gate parked (one at a time: an agent makes one call)
	parked      *refgate.Parked
	parkedRetry bool
	parkedShown int64 // the parked count the last report gave
	// ownBound is what the process's own budget allows while policyd is
	// away: 5 first attempts above its threshold, then 0.1 a second.
	ownBound   int64
	localSince time.Time
}

// target is what the process calls: its agent's model, which it learns at
// its first call (Admit).
func (p *streamProcess) target() fleet.Target {
	return fleet.Target{Provider: p.provider, Model: p.modelName, KeyID: KeyID}
}

func (p *streamProcess) pending() bool {
	return p.admitted+p.shed+p.succeeded+p.failed+p.retries+p.parkedNew+p.firstTokens+p.retryTokens+p.usedTokens+p.outputCalls != 0 || p.parkedCount() != p.parkedShown
}

func (p *streamProcess) parkedCount() int64 {
	if p.parked != nil {
		return 1
	}
	return 0
}

func (p *streamProcess) activity(now time.Time) {
	if p.reportAt.IsZero() {
		p.reportAt = now.Add(time.Duration(float64(reportEvery) * (0.9 + 0.2*p.jit.Float64())))
	}
}

// disconnect: policyd is gone; the stream retries with backoff.
func (p *streamProcess) disconnect(now time.Time) {
	if p.connected || p.nextTry.IsZero() {
		p.connected, p.subscribed, p.backoff = false, false, time.Second
		p.nextTry = now.Add(time.Duration(p.jit.Float64() * float64(p.backoff)))
		return
	}
	for !now.Before(p.nextTry) {
		p.backoff = min(2*p.backoff, reconnectMax)
		p.nextTry = p.nextTry.Add(time.Duration(p.jit.Float64() * float64(p.backoff)))
	}
}

// report sends the interval's counts and takes the answer.
func (p *streamProcess) report(now time.Time) {
	in := p.sin
	in.msgs++
	lim := fleet.ReadLimits(p.provider, p.headers, now)
	in.fleets[p.replica].Report(fleet.Usage{Target: p.target(), ClientID: p.id, Admitted: p.admitted, Shed: p.shed,
		Succeeded: p.succeeded, Failed: p.failed, Retries: p.retries, Parked: p.parkedCount(),
		ParkedNew: p.parkedNew, Released: p.released,
		RequestsPerMinute: lim.RequestsPerMinute, RemainingShare: lim.RemainingShare,
		InputTokensPerMinute: lim.InputTokensPerMinute, FirstAttemptTokens: p.firstTokens, RetryTokens: p.retryTokens,
		InputTokensUsed: p.usedTokens, InputTokensEstimated: p.usedEstimates,
		OutputTokensPerMinute: lim.OutputTokensPerMinute, OutputTokensUsed: p.outputTokens, OutputCalls: p.outputCalls,
		BatchFirst: p.batchFirst})
	p.admitted, p.shed, p.succeeded, p.failed, p.retries, p.headers = 0, 0, 0, 0, 0, nil
	p.firstTokens, p.retryTokens, p.batchFirst, p.usedTokens, p.usedEstimates = 0, 0, 0, 0, 0
	p.outputTokens, p.outputCalls = 0, 0
	p.parkedNew, p.released = 0, 0
	p.parkedShown = p.parkedCount()
	p.reportAt = time.Time{}
	first := !p.subscribed
	p.subscribed = true
	p.deliver(now, first)
}

// deliver computes the process's assignment and, when it differs from
// what the gate holds (or force), sends it.
func (p *streamProcess) deliver(now time.Time, force bool) {
	a := p.sin.fleets[p.replica].Assign(p.target(), p.id)
	if !force && !a.Differs(p.sent, p.sentAt, now) {
		return
	}
	p.sin.msgs++
	p.sent, p.sentAt = a, now
	p.gen++
	ra := &refgate.Assignment{TTL: a.TTL, Breaker: a.Breaker, Hold: a.Hold, Stop: a.Stop,
		AdmitFraction: a.AdmitFraction, ProbePermits: a.ProbePermits, Reason: a.Reason, ParkHint: a.ParkHint}
	if a.Classes {
		ra.BatchAdmitFraction = &a.BatchAdmitFraction
	}
	if a.Permits {
		ra.PacePermits = &a.PacePermits
	}
	p.gate.Assign(now, ra)
}

var _ Gater = (*streamProcess)(nil)

// Admit implements Gater.
func (p *streamProcess) Admit(now time.Time, call Call, left time.Duration, retry bool, r *rand.Rand) GateAnswer {
	model := call.Model
	p.modelName, p.provider = model, call.Provider
	p.prompt, p.class = call.Prompt, refgate.Interactive
	if call.Batch {
		p.class = refgate.Batch
	}
	p.gate.Target = p.provider + "/" + model
	if p.sin.up() && p.connected && !p.subscribed {
		// The first call on a target waits for its first assignment (a
		// local daemon answers in well under the clients' 100-ms limit).
		p.report(now)
	}
	if !p.sin.up() && p.gate.Assigned() && p.gate.Age(now) >= p.sent.TTL+refgate.Grace && p.localSince.IsZero() {
		p.localSince = now
		p.ownBound += 5 + int64(0.1*(RestartDown+reconnectMax).Seconds())
	}
	if p.sin.up() {
		p.localSince = time.Time{}
	}
	p.activity(now)
	var v refgate.Verdict
	if retry {
		v = p.gate.CheckRetry(now, left)
	} else {
		v = p.gate.CheckClass(now, left, p.class, false, r.Float64())
	}
	return p.answer(v, retry, false)
}

// Resume implements Gater.
func (p *streamProcess) Resume(now time.Time, left time.Duration, r *rand.Rand) GateAnswer {
	p.activity(now)
	v := p.gate.Resume(now, p.parked, r.Float64())
	return p.answer(v, p.parkedRetry, true)
}

// answer counts a gate's verdict for the reports: first attempts admitted
// (a released call among them), shed, parked at their first check.
func (p *streamProcess) answer(v refgate.Verdict, retry, resumed bool) GateAnswer {
	p.parked, p.parkedRetry = nil, false
	switch v.Action {
	case refgate.Admit, refgate.Wait:
		if !retry {
			p.admitted++
			if resumed {
				p.released++
			} else {
				p.firstCheck()
			}
		}
		return GateAnswer{Send: true, Wait: v.Wait}
	case refgate.Park:
		p.parked, p.parkedRetry = v.Parked, retry
		if !retry && !resumed {
			p.parkedNew++
			p.firstCheck()
		}
		return GateAnswer{Park: true}
	}
	if resumed && !retry {
		p.shed++ // gave up parked: it arrived when it parked
		p.parkedNew--
		return GateAnswer{}
	}
	if !retry {
		p.shed++
		p.firstCheck()
	}
	return GateAnswer{}
}

// firstCheck counts a first attempt at its first check by the gate: its
// input tokens, and its class.
func (p *streamProcess) firstCheck() {
	p.firstTokens += estimate(p.prompt)
	if p.class == refgate.Batch {
		p.batchFirst++
	}
}

// Generation implements Gater.
func (p *streamProcess) Generation() uint64 { return p.gen }

// Failed implements Process: the gate's budget counts the failure, and
// policyd (or, while it is down, the fail-open policy) decides.
func (p *streamProcess) Failed(a *Attempt) (bool, time.Duration) {
	now := a.Now
	p.gate.Record(now, false)
	p.activity(now)
	var retry bool
	var d time.Duration
	if !p.sin.up() {
		p.failed++
		retry, d = failOpen(a)
	} else {
		retry, d = p.policydProcess.Failed(a)
	}
	if retry {
		p.retries++
		p.retryTokens += estimate(a.Prompt)
	}
	return retry, d
}

// Succeeded implements Process.
func (p *streamProcess) Succeeded(a *Attempt) {
	p.gate.Record(a.Now, true)
	p.succeeded++
	if a.Prompt > 0 { // the response's usage
		p.usedTokens += a.Prompt
		p.usedEstimates += estimate(a.Prompt)
	}
	if a.Outcome.Output > 0 { // the last output count the response carried
		p.outputTokens += a.Outcome.Output
		p.outputCalls++
	}
	if a.Outcome.Headers != nil {
		p.headers = a.Outcome.Headers
	}
	p.activity(a.Now)
	if cur := p.gate.Current(); cur != nil && cur.Breaker == fleet.HalfOpen {
		p.reportAt = a.Now // a probe's success is reported at once
	}
}
