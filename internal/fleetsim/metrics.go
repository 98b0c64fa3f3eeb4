package fleetsim

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/policyd/policyd/internal/fleet"
)

// baselineSkip is the warm-up left out of the baseline: every agent starts
// thinking at 0, so the first seconds are not yet steady.
const baselineSkip = 10 * time.Second

// HerdWindow is how long after the incident the herd is looked for.
const HerdWindow = 60 * time.Second

// DetectionAllowance is how long after an outage starts the fleet may take
// to see it before amplification_after_detection counts.
const DetectionAllowance = 5 * time.Second

// TTRWindow is the goodput window recovery is measured on, and TTRShare the
// share of the baseline goodput it must reach.
const (
	TTRWindow = 10 * time.Second
	TTRShare  = 0.95
)

// recorder counts per second of virtual time.
type recorder struct {
	sc Scenario
	// per second: attempts (all models, and to Model, the failing bucket),
	// logical calls started on Model, calls that succeeded (by their end) on
	// Model and on OtherModel, 429s and successful attempts on Model.
	attempts, failAttempts, failStarts, failGood, otherGood, throttled, okAttempts []int
	ok, failed                                                                     int
	attemptsTotal                                                                  int
	decisions, successPathDecisions                                                int64
	firstOK                                                                        int
	shedCalls                                                                      []int
	// per second: successful calls (all models), the most calls parked
	// at once; and every successful call's latency
	good, parkedMax []int
	// per second: the input tokens of successful attempts on Model
	okTokens  []int64
	okOutput  []int64 // and their output tokens (the output scenario's)
	parkedNow int
	parkedSec int // the last second parkedMax was filled to
	latencies []time.Duration
	// by class (interactive, batch): finished calls and latencies
	classes [2]classCounts
}

// classCounts are one priority class's calls.
type classCounts struct {
	ok, failed int
	latencies  []time.Duration
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// p95 is the 95th percentile of ls in seconds (NaN: none).
func p95(ls []time.Duration) float64 {
	n := len(ls)
	if n == 0 {
		return math.NaN()
	}
	ls = slices.Clone(ls)
	slices.Sort(ls)
	return ls[min(n-1, int(math.Ceil(0.95*float64(n)))-1)].Seconds()
}

func newRecorder(sc Scenario) *recorder {
	n := int(sc.Duration/time.Second) + 1
	mk := func() []int { return make([]int, n) }
	return &recorder{sc: sc, attempts: mk(), failAttempts: mk(), failStarts: mk(), failGood: mk(), otherGood: mk(), throttled: mk(), okAttempts: mk(), shedCalls: mk(),
		good: mk(), parkedMax: mk(), okTokens: make([]int64, n), okOutput: make([]int64, n)}
}

// shed counts a call a gate did not send.
func (r *recorder) shed(now time.Duration, model string) {
	if model == Model {
		r.shedCalls[sec(now)]++
	}
}

func sec(t time.Duration) int { return int(t / time.Second) }

func (r *recorder) callStarted(now time.Duration, model string) {
	if model == Model {
		r.failStarts[sec(now)]++
	}
}

func (r *recorder) attempt(now time.Duration, model string, prompt int64, o *Outcome) {
	s := sec(now)
	r.attempts[s]++
	r.attemptsTotal++
	if model != Model {
		return
	}
	r.failAttempts[s]++
	if o.Throttled {
		r.throttled[s]++
	}
	if o.OK {
		r.okAttempts[s]++
		r.okTokens[s] += prompt
		r.okOutput[s] += o.Output
	}
}

// park counts a call parked (+1) or leaving the park (-1).
func (r *recorder) park(now time.Duration, n int) {
	s := min(sec(now), len(r.parkedMax)-1)
	for ; r.parkedSec < s; r.parkedSec++ {
		r.parkedMax[r.parkedSec+1] = r.parkedNow // the seconds without a change
	}
	r.parkedNow += n
	r.parkedMax[s] = max(r.parkedMax[s], r.parkedNow)
}

func (r *recorder) callDone(now time.Duration, model string, batch bool, ok bool, attempts int, decisions int64, latency time.Duration) {
	r.decisions += decisions
	cl := &r.classes[b2i(batch)]
	if !ok {
		r.failed++
		cl.failed++
		return
	}
	r.ok++
	cl.ok++
	r.latencies = append(r.latencies, latency)
	cl.latencies = append(cl.latencies, latency)
	if s := sec(now); s < len(r.good) {
		r.good[s]++
	}
	if attempts == 1 {
		r.firstOK++
		r.successPathDecisions += decisions
	}
	switch model {
	case Model:
		r.failGood[sec(now)]++
	default:
		r.otherGood[sec(now)]++
	}
}

// Result is one run's measurements. A metric that does not apply is NaN.
type Result struct {
	Scenario string
	Policy   string
	Agents   int
	// Life: logical calls per process, 0 for the whole run.
	Life int
	Seed uint64
	// Replicas of policyd sharing the fleet (1: one daemon).
	Replicas int

	// Amplification: attempts to the failing bucket during the incident ÷
	// logical calls to it started during the incident.
	Amplification float64
	// AfterDetection: the same from DetectionAllowance after the incident
	// starts (outage, partial and restart): what the fleet sends once it
	// has had the time to see the outage.
	AfterDetection float64
	// DaemonDown (restart): the amplification while policyd is down, and
	// OwnAdmitted the first attempts the clients' own budgets admitted
	// then, against OwnBound, what those budgets allow.
	DaemonDown            float64
	OwnAdmitted, OwnBound int64
	// Shed: calls the gates did not send ÷ calls started, during the incident.
	Shed float64
	// StreamRate is stream messages per client process per second
	// (fleet-stream): reports up and assignment messages down.
	StreamRate float64
	// Load: the failing bucket's attempt rate during the incident ÷ its
	// baseline attempt rate (the mean from 10 s to the incident's start).
	Load float64
	// Herd: the largest 1-s attempt count on the failing bucket in the 60 s
	// after the incident ends ÷ the baseline attempt rate.
	Herd float64
	// HerdRef is the same statistic in the same run without the incident:
	// the noise floor (with 200 agents, the busiest of 60 seconds is about
	// 1.6 times the mean by chance alone).
	HerdRef float64
	// TTR: seconds from the provider's recovery to the start of the first
	// 10-s window whose goodput on the failing bucket is at least 95 % of
	// its baseline; +Inf when the run ends first.
	TTR float64
	// Goodput: successful logical calls per second over the whole run.
	Goodput float64
	// Loss: logical calls given up ÷ logical calls finished, whole run.
	Loss float64
	// P95: the 95th percentile latency of successful calls, seconds (from
	// the call's start: parks and waits included).
	P95 float64
	// Quota scenario: 429s ÷ attempts, and successful attempts ÷ what the
	// quota allowed, during the incident.
	Throttled, QuotaUsed float64
	// Tokens scenario: the input tokens of successful attempts a second
	// over the run, in thousands (calls of every size count by their size).
	TokenGoodput float64
	// Output scenario: the output tokens of successful attempts a second
	// over the run, in thousands.
	OutputGoodput float64
	// Classes scenario: p95 latency (s) and loss by class (interactive,
	// batch), and the interactive calls' p95 on the unloaded key (the same
	// run without the quota).
	ClassP95, ClassLoss [2]float64
	ClassP95Ref         float64
	// Partial scenario: the unaffected model's successful calls during the
	// incident ÷ the same agents' in the same run without the incident.
	Unaffected float64

	// BaselineRate is the failing bucket's attempts per second before the
	// incident; BaselineGoodput its successful calls per second.
	BaselineRate, BaselineGoodput float64
	// Calls finished, and how many succeeded at the first attempt.
	Calls, FirstOK int
	// Attempts sent, all models.
	Attempts int
	// Decisions: daemon RPCs (NextDelay); SuccessPathDecisions: those made
	// for calls whose first attempt succeeded (must be 0).
	Decisions, SuccessPathDecisions int64
	// PerSecond: attempts sent in each second of the run, all models;
	// GoodPerSecond the calls that succeeded in it; Parked the most calls
	// parked in it.
	PerSecond, GoodPerSecond, Parked []int
	// Fleet: what fleet memory changed, by effect (policy fleet only).
	Fleet map[string]int64

	otherGood []int
}

func sum[T int | int64](xs []T, from, to time.Duration) T {
	a, b := sec(from), sec(to)
	b = min(b, len(xs))
	var n T
	for i := max(a, 0); i < b; i++ {
		n += xs[i]
	}
	return n
}

func (r *recorder) result(rn *run) *Result {
	sc := r.sc
	r.park(rn.now, 0)
	res := &Result{Scenario: sc.Name, Policy: rn.cfg.Policy.Name(), Agents: rn.cfg.Agents, Life: rn.cfg.Life, Seed: rn.cfg.Seed,
		Replicas:  rn.cfg.Replicas,
		Throttled: math.NaN(), QuotaUsed: math.NaN(), Unaffected: math.NaN(), TokenGoodput: math.NaN(), OutputGoodput: math.NaN(),
		ClassP95: [2]float64{math.NaN(), math.NaN()}, ClassLoss: [2]float64{math.NaN(), math.NaN()}, ClassP95Ref: math.NaN(),
		Calls: r.ok + r.failed, FirstOK: r.firstOK, Attempts: r.attemptsTotal,
		Decisions: r.decisions, SuccessPathDecisions: r.successPathDecisions,
		PerSecond: r.attempts[:sec(sc.Duration)], GoodPerSecond: r.good[:sec(sc.Duration)], Parked: r.parkedMax[:sec(sc.Duration)],
		otherGood: r.otherGood}
	if f, ok := rn.inst.(interface{ Fleet() *fleet.Fleet }); ok && f.Fleet() != nil {
		res.Fleet = rn.inst.(interface{ Effects() map[string]int64 }).Effects()
	}
	baseFrom := baselineSkip
	if baseFrom >= sc.Start {
		baseFrom = 0
	}
	baseSecs := (sc.Start - baseFrom).Seconds()
	res.BaselineRate = float64(sum(r.failAttempts, baseFrom, sc.Start)) / baseSecs
	res.BaselineGoodput = float64(sum(r.failGood, baseFrom, sc.Start)) / baseSecs
	window := (sc.End - sc.Start).Seconds()
	inWindow := sum(r.failAttempts, sc.Start, sc.End)
	res.Amplification = float64(inWindow) / float64(max(sum(r.failStarts, sc.Start, sc.End), 1))
	res.AfterDetection, res.DaemonDown, res.Shed, res.StreamRate = math.NaN(), math.NaN(), math.NaN(), math.NaN()
	if sc.Name == Outage || sc.Name == Partial || sc.Name == Restart {
		from := sc.Start + DetectionAllowance
		res.AfterDetection = float64(sum(r.failAttempts, from, sc.End)) / float64(max(sum(r.failStarts, from, sc.End), 1))
	}
	if sc.Name == Restart {
		res.DaemonDown = float64(sum(r.failAttempts, sc.DownFrom, sc.DownTo)) / float64(max(sum(r.failStarts, sc.DownFrom, sc.DownTo), 1))
	}
	if rn.cfg.Policy.Name() == PolicyFleetStream {
		res.Shed = float64(sum(r.shedCalls, sc.Start, sc.End)) / float64(max(sum(r.failStarts, sc.Start, sc.End), 1))
	}
	if s, ok := rn.inst.(interface {
		streamStats() (msgs, procSeconds float64, own, bound int64)
	}); ok {
		msgs, ps, own, bound := s.streamStats()
		res.StreamRate = msgs / max(ps, 1)
		res.OwnAdmitted, res.OwnBound = own, bound
	}
	res.Load = float64(inWindow) / window / res.BaselineRate
	peak := 0
	for s := sc.End; s < sc.End+HerdWindow && s < sc.Duration; s += time.Second {
		peak = max(peak, r.failAttempts[sec(s)])
	}
	res.Herd = float64(peak) / res.BaselineRate
	res.TTR = math.Inf(1)
	need := TTRShare * res.BaselineGoodput * TTRWindow.Seconds()
	for k := time.Duration(0); sc.End+k+TTRWindow <= sc.Duration; k += time.Second {
		if float64(sum(r.failGood, sc.End+k, sc.End+k+TTRWindow)) >= need {
			res.TTR = k.Seconds()
			break
		}
	}
	good := 0
	for i := range r.failGood {
		good += r.failGood[i] + r.otherGood[i]
	}
	res.Goodput = float64(good) / sc.Duration.Seconds()
	res.Loss = float64(r.failed) / float64(max(r.ok+r.failed, 1))
	res.P95 = p95(r.latencies)
	if sc.Name == Classes {
		for i, cl := range r.classes {
			res.ClassP95[i] = p95(cl.latencies)
			res.ClassLoss[i] = float64(cl.failed) / float64(max(cl.ok+cl.failed, 1))
		}
	}
	switch sc.Name {
	case Quota, Classes:
		res.Throttled = float64(sum(r.throttled, sc.Start, sc.End)) / float64(max(inWindow, 1))
		allowed := float64(QuotaPerMinute)/60*window + QuotaBurst
		res.QuotaUsed = float64(sum(r.okAttempts, sc.Start, sc.End)) / allowed
	case Tokens:
		res.TokenGoodput = float64(sum(r.okTokens, 0, sc.Duration)) / sc.Duration.Seconds() / 1000
		res.Throttled = float64(sum(r.throttled, sc.Start, sc.End)) / float64(max(inWindow, 1))
		allowed := float64(TokensPerMinute) / 60 * (window + 1) // the bucket starts full: a second's worth
		res.QuotaUsed = float64(sum(r.okTokens, sc.Start, sc.End)) / allowed
	case Output:
		res.OutputGoodput = float64(sum(r.okOutput, 0, sc.Duration)) / sc.Duration.Seconds() / 1000
		res.Throttled = float64(sum(r.throttled, sc.Start, sc.End)) / float64(max(inWindow, 1))
		allowed := float64(OutputTokensPerMinute) / 60 * (window + 1) // the bucket starts with a second's worth
		res.QuotaUsed = float64(sum(r.okOutput, sc.Start, sc.End)) / allowed
	}
	return res
}

// Line is the result as `make simulate` prints it, e.g.
//
//	sim: scenario=outage policy=fleet agents=200 life=3 amplification=1.04 load=0.9 herd=1.2 ttr_s=7 goodput=16.5 loss=0.03
//
// with replicas=N after life when more than one policyd shares the fleet.
// A metric that does not apply is "-"; a recovery the run did not see is "inf".
func (r *Result) Line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sim: scenario=%s policy=%s agents=%d life=%s", r.Scenario, r.Policy, r.Agents, LifeName(r.Life))
	if r.Replicas > 1 {
		fmt.Fprintf(&b, " replicas=%d", r.Replicas)
	}
	for _, f := range r.Fields() {
		fmt.Fprintf(&b, " %s=%s", f.Name, f.Value)
	}
	return b.String()
}

// Field is one metric, formatted.
type Field struct{ Name, Value string }

// Fields are the metrics in the line's order; the scenario's extras
// (throttled, quota_used for quota; unaffected for partial) and the daemon
// RPCs per logical call come last.
func (r *Result) Fields() []Field {
	fs := []Field{
		{"amplification", num(r.Amplification, 2)},
		{"amplification_after_detection", num(r.AfterDetection, 2)},
		{"load", num(r.Load, 2)},
		{"herd", num(r.Herd, 2)},
		{"herd_ref", num(r.HerdRef, 2)},
		{"ttr_s", num(r.TTR, 0)},
		{"goodput", num(r.Goodput, 2)},
		{"loss", num(r.Loss, 3)},
		{"p95_s", num(r.P95, 1)},
	}
	if r.Scenario == Classes {
		fs = append(fs, Field{"p95_interactive_s", num(r.ClassP95[0], 1)}, Field{"p95_interactive_unloaded_s", num(r.ClassP95Ref, 1)},
			Field{"p95_batch_s", num(r.ClassP95[1], 1)}, Field{"loss_interactive", num(r.ClassLoss[0], 3)}, Field{"loss_batch", num(r.ClassLoss[1], 3)})
	}
	if r.Scenario == Quota || r.Scenario == Tokens || r.Scenario == Classes || r.Scenario == Output {
		fs = append(fs, Field{"throttled", num(r.Throttled, 3)}, Field{"quota_used", num(r.QuotaUsed, 2)})
	}
	if r.Scenario == Tokens {
		fs = append(fs, Field{"token_goodput_k", num(r.TokenGoodput, 1)})
	}
	if r.Scenario == Output {
		fs = append(fs, Field{"output_goodput_k", num(r.OutputGoodput, 1)})
	}
	if r.Scenario == Partial {
		fs = append(fs, Field{"unaffected", num(r.Unaffected, 3)})
	}
	if r.Scenario == Restart {
		fs = append(fs, Field{"amplification_daemon_down", num(r.DaemonDown, 2)})
		if r.Policy == PolicyFleetStream {
			fs = append(fs, Field{"own_budget_admitted", strconv.FormatInt(r.OwnAdmitted, 10)}, Field{"own_budget_bound", strconv.FormatInt(r.OwnBound, 10)})
		}
	}
	if r.Policy == PolicyFleetStream {
		fs = append(fs, Field{"shed", num(r.Shed, 3)}, Field{"stream_msgs_per_s", num(r.StreamRate, 3)})
	}
	rpcs := math.NaN()
	if r.Policy == PolicyFleet || r.Policy == PolicyFleetStream || r.Policy == PolicyStateless || r.Policy == PolicyGeminiCLI {
		rpcs = float64(r.Decisions) / float64(max(r.Calls, 1))
	}
	fs = append(fs, Field{"rpcs_per_call", num(rpcs, 2)}, Field{"rpcs_on_success", num(nanIf(float64(r.SuccessPathDecisions), math.IsNaN(rpcs)), 0)})
	return fs
}

func nanIf(v float64, nan bool) float64 {
	if nan {
		return math.NaN()
	}
	return v
}

func num(v float64, prec int) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case math.IsInf(v, 1):
		return "inf"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

// LifeName is "inf" for a process per agent, else the calls per process.
func LifeName(life int) string {
	if life == 0 {
		return "inf"
	}
	return strconv.Itoa(life)
}
