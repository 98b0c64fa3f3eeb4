package fleetsim

import (
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/policyd/policyd/internal/fleet"
)

const agents = 200 // the goals are stated for 200 agents

func simulate(t *testing.T, scenario, pol string, life int, seed uint64) *Result {
	t.Helper()
	sc, err := NewScenario(scenario, DefaultTiming)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPolicy(pol)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(Config{Scenario: sc, Policy: p, Agents: agents, Life: life, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res.Line())
	return res
}

// Fleet memory's goals (docs/fleet-simulation.md), for both process lifetimes; the
// stateless policy (today's answers) runs alongside as the contrast.
func TestFleetGoals(t *testing.T) {
	skipUnderRace(t)
	openPeriods := 2 * fleet.Defaults().Breaker.OpenFor.Seconds()
	for _, life := range []int{0, 3} {
		t.Run("life="+LifeName(life), func(t *testing.T) {
			byScenario := map[string]map[string]*Result{}
			for _, sc := range ScenarioNames {
				byScenario[sc] = map[string]*Result{}
				for _, pol := range []string{PolicyFleet, PolicyStateless} {
					res := simulate(t, sc, pol, life, 1)
					byScenario[sc][pol] = res
					// Zero RPCs on the success path.
					if res.SuccessPathDecisions != 0 {
						t.Errorf("%s: %d decisions for calls whose first attempt succeeded; want 0", res.Line(), res.SuccessPathDecisions)
					}
					if res.FirstOK == 0 || res.Decisions == 0 {
						t.Errorf("%s: no first-attempt successes (%d) or no decisions (%d)", res.Line(), res.FirstOK, res.Decisions)
					}
				}
			}
			out, stateless := byScenario[Outage][PolicyFleet], byScenario[Outage][PolicyStateless]
			// Full outage: amplification ≤ 1.1 (stateless: the attempt cap).
			if out.Amplification > 1.1 {
				t.Errorf("outage: amplification %.2f > 1.1", out.Amplification)
			}
			if stateless.Amplification < 2 {
				t.Errorf("outage, stateless: amplification %.2f; the contrast is gone", stateless.Amplification)
			}
			// Recovery to 95 % goodput within 2 open periods.
			for _, sc := range []string{Outage, Partial} {
				if r := byScenario[sc][PolicyFleet]; r.TTR > openPeriods {
					t.Errorf("%s: recovered to 95 %% goodput after %v s; want ≤ %v (2 open periods)", sc, r.TTR, openPeriods)
				}
			}
			// The herd after a shared Retry-After: ≤ 1.5 × baseline, or no
			// more than the busiest second the same fleet has without the
			// hint (herd_ref): the 1-s counts of 200 agents are about
			// Poisson(16.7), whose busiest of 60 seconds alone is ≈ 1.6–1.7 ×.
			// TestHerdAtScale checks 1.5 where the noise is below it.
			herd, herdStateless := byScenario[Herd][PolicyFleet], byScenario[Herd][PolicyStateless]
			if herd.Herd > max(1.5, herd.HerdRef) {
				t.Errorf("herd: peak %.2f × baseline; want ≤ 1.5 or the healthy fleet's %.2f", herd.Herd, herd.HerdRef)
			}
			if herdStateless.Herd < 2*herd.Herd {
				t.Errorf("herd, stateless: %.2f vs fleet %.2f; the contrast is gone", herdStateless.Herd, herd.Herd)
			}
			// The model that is not down keeps its goodput.
			if u := byScenario[Partial][PolicyFleet].Unaffected; math.Abs(u-1) > 0.03 {
				t.Errorf("partial: the unaffected model's goodput is %.3f of its baseline; want within 3 %%", u)
			}
		})
	}
}

// The Coordinate stream's goals (200 agents): with each process's stream and
// gate, the fleet skips first attempts that are sure to fail.
func TestStreamGoals(t *testing.T) {
	skipUnderRace(t)
	for _, life := range []int{0, 3} {
		t.Run("life="+LifeName(life), func(t *testing.T) {
			t.Parallel()
			res := map[string]*Result{}
			for _, sc := range []string{Outage, Partial, Quota, Restart} {
				r := simulate(t, sc, PolicyFleetStream, life, 1)
				res[sc] = r
				// Zero RPCs on the success path; stream traffic ≤ 1 message a
				// second per client process (reports up, assignments down).
				if r.SuccessPathDecisions != 0 {
					t.Errorf("%s: %d decisions on the success path", r.Line(), r.SuccessPathDecisions)
				}
				if r.StreamRate > 1 || r.StreamRate <= 0 {
					t.Errorf("%s: %.3f stream messages a second per process; want (0, 1]", r.Line(), r.StreamRate)
				}
			}
			// Full outage, after 5 s of detection: ≤ 0.1. The breaker trips
			// on the last 2 s of outcomes, so after 5 s only probes reach the
			// provider (TestStreamRecovery checks seeds 1–20).
			if a := res[Outage].AfterDetection; a > 0.1 {
				t.Errorf("outage: amplification after detection %.2f > 0.1", a)
			}
			// An unaffected bucket loses < 2 % goodput.
			if u := res[Partial].Unaffected; u < 0.98 {
				t.Errorf("partial: the unaffected model keeps %.3f of its goodput; want ≥ 0.98", u)
			}
			// A shared quota at 1.6× its limit: ≤ 5 % 429s and ≥ 95 % of the
			// quota used (the pace's grants keep the admitted second smooth).
			if q := res[Quota]; q.Throttled > 0.05 || q.QuotaUsed < 0.95 {
				t.Errorf("quota: %.3f of attempts throttled, %.2f of the quota used; want ≤ 0.05 and ≥ 0.95", q.Throttled, q.QuotaUsed)
			}
			// After the limit lifts, the learnt limit expires and the pace
			// goes: recovery within 10 s.
			if q := res[Quota]; q.TTR > 10 {
				t.Errorf("quota: recovery %v s after the limit lifted; want ≤ 10", q.TTR)
			}
			// policyd killed mid-outage: the processes admit their first
			// attempts past their expired assignments (policyd away never
			// stops an agent), and the fleet still sends fewer attempts than
			// stateless clients (which never gate).
			r := res[Restart]
			if r.OwnAdmitted == 0 {
				t.Errorf("restart: no first attempt admitted past an expired assignment")
			}
		})
	}
}

// baselines are the anchors fleet memory must do no worse than, for the
// agents, under the same deadlines.
var baselines = []string{PolicyStateless, PolicySDK, PolicyGeminiCLI, PolicyAWSStandard, PolicyGRPCA6}

// Never at the agents' expense: in every incident, with the gates parking
// calls, fleet-stream loses no more calls (+0.01) and completes no fewer
// (×0.98) than the best of the anchors under the same deadlines, and the
// provider's busiest second after the incident stays ≤ 2 × its baseline.
// shortfalls are the goals not met, with the measured bound that holds
// instead (docs/fleet-simulation.md, "Goals not met").
func TestAgentGoals(t *testing.T) {
	skipUnderRace(t)
	// The herd's bounds are seed 1's (outage 1.89 and 1.89 ×, partial 2.14
	// and 1.90 ×, restart 1.95 and 1.71 ×, life inf and 3); over seeds 1–20
	// the outage's median meets the goal and its worst is 2.09 ×
	// (docs/fleet-simulation.md).
	shortfalls := map[string]struct{ goodput, herd float64 }{
		Partial: {herd: 2.2}, // half the agents: a noisier second (healthy 1.78)
	}
	for _, sc := range []string{Outage, Partial, Quota, Restart} {
		for _, life := range []int{0, 3} {
			t.Run(sc+"/life="+LifeName(life), func(t *testing.T) {
				t.Parallel()
				fs := simulate(t, sc, PolicyFleetStream, life, 1)
				bestLoss, bestGood, by := math.Inf(1), 0.0, ""
				for _, pol := range baselines {
					r := simulate(t, sc, pol, life, 1)
					bestLoss = min(bestLoss, r.Loss)
					if r.Goodput > bestGood {
						bestGood, by = r.Goodput, pol
					}
				}
				goodShare, herdMax := 0.98, 2.0
				if s, ok := shortfalls[sc]; ok {
					if s.goodput > 0 {
						goodShare = s.goodput
					}
					if s.herd > 0 {
						herdMax = s.herd
					}
				}
				if fs.Loss > bestLoss+0.01 {
					t.Errorf("%s: loss %.3f, the best baseline's %.3f; want ≤ +0.01", sc, fs.Loss, bestLoss)
				}
				if fs.Goodput < goodShare*bestGood {
					t.Errorf("%s: goodput %.2f, the best baseline's (%s) %.2f; want ≥ %.2f ×", sc, fs.Goodput, by, bestGood, goodShare)
				}
				if fs.Herd > max(herdMax, fs.HerdRef) {
					t.Errorf("%s: busiest second after the incident %.2f × baseline (healthy %.2f); want ≤ %.1f", sc, fs.Herd, fs.HerdRef, herdMax)
				}
			})
		}
	}
}

// Pacing on input tokens (the tokens scenario: prompts of 1 k–100 k
// tokens at twice a key's input-token limit), with one and three replicas
// sharing the fleet, both lifetimes, over tokenSeeds: ≤ 2 % of attempts
// throttled with ≥ 90 % of the limit used in every run, no more calls lost
// than the seed's best baseline (+0.01), and at least 0.9 of its input
// tokens served. Not met (docs/fleet-simulation.md, "Goals not met"):
// calls completed are 0.85–0.88 of the best baseline's, which completes
// more small calls because it loses big ones (loss 0.05–0.06 against
// 0.002).
func TestTokenGoals(t *testing.T) {
	checkPacingGoals(t, Tokens, tokenSeeds, "input tokens", func(r *Result) float64 { return r.TokenGoodput })
}

// Priority classes (the classes scenario: the quota, with the interactive
// agents' calls interactive and the batch agents' batch): the interactive
// calls' p95 latency within 20 % of the unloaded key's while batch absorbs
// the wait, no interactive call lost that a baseline (none of which paces)
// completes, and the calls completed at least 0.98 of the best baseline's.
func TestClassesGoals(t *testing.T) {
	skipUnderRace(t)
	var bestInteractiveLoss, bestGood = math.Inf(1), 0.0
	for _, pol := range baselines {
		r := simulate(t, Classes, pol, 0, 1)
		bestInteractiveLoss, bestGood = min(bestInteractiveLoss, r.ClassLoss[0]), max(bestGood, r.Goodput)
	}
	for _, life := range []int{0, 3} {
		t.Run("life="+LifeName(life), func(t *testing.T) {
			r := simulate(t, Classes, PolicyFleetStream, life, 1)
			if r.ClassP95[0] > 1.2*r.ClassP95Ref || r.ClassP95[1] <= r.ClassP95[0] {
				t.Errorf("p95: interactive %.1f s (unloaded %.1f s), batch %.1f s; want interactive ≤ 1.2 × unloaded, batch waiting longer",
					r.ClassP95[0], r.ClassP95Ref, r.ClassP95[1])
			}
			if r.ClassLoss[0] > bestInteractiveLoss {
				t.Errorf("interactive loss %.3f, the best baseline's %.3f", r.ClassLoss[0], bestInteractiveLoss)
			}
			if r.Goodput < 0.98*bestGood {
				t.Errorf("goodput %.2f, the best baseline's %.2f; want ≥ 0.98 ×", r.Goodput, bestGood)
			}
		})
	}
}

// The agents' goals hold at 2,000 agents on one key, in every incident:
// loss and goodput against the best baseline, the busiest second after
// the incident (≤ 2 ×: with ten times the calls, a second's count is far
// less noisy than with 200), recovery, the outage's amplification after
// detection (0.01 here: with ten times the calls starting, the
// detection's last second weighs less), and the quota's 429s and use.
func TestAgentGoalsAtScale(t *testing.T) {
	if testing.Short() {
		t.Skip("2,000 agents: checked without -short (make sim-goals)")
	}
	skipUnderRace(t)
	for _, sc := range []string{Outage, Partial, Quota, Restart} {
		t.Run(sc, func(t *testing.T) {
			t.Parallel()
			scn, err := NewScenario(sc, DefaultTiming)
			if err != nil {
				t.Fatal(err)
			}
			runs := map[string]*Result{}
			var mu sync.Mutex
			var wg sync.WaitGroup
			for _, pol := range append([]string{PolicyFleetStream}, baselines...) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					p, err := NewPolicy(pol)
					if err != nil {
						t.Error(err)
						return
					}
					r, err := Run(Config{Scenario: scn, Policy: p, Agents: 2000, Seed: 1})
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					runs[pol] = r
					mu.Unlock()
				}()
			}
			wg.Wait()
			fs := runs[PolicyFleetStream]
			if fs == nil {
				t.Fatal("no fleet-stream run")
			}
			t.Log(fs.Line())
			bestLoss, bestGood := math.Inf(1), 0.0
			for _, pol := range baselines {
				if r := runs[pol]; r != nil {
					bestLoss, bestGood = min(bestLoss, r.Loss), max(bestGood, r.Goodput)
				}
			}
			const goodShare = 0.98
			if fs.Loss > bestLoss+0.01 || fs.Goodput < goodShare*bestGood {
				t.Errorf("loss %.3f (best %.3f), goodput %.2f (best %.2f, want ≥ %.2f ×)", fs.Loss, bestLoss, fs.Goodput, bestGood, goodShare)
			}
			if fs.Herd > 2 || fs.TTR > 10 || fs.SuccessPathDecisions != 0 || fs.StreamRate > 1 {
				t.Errorf("herd %.2f × baseline, recovery %v s, %d RPCs on the success path, %.2f stream messages a second",
					fs.Herd, fs.TTR, fs.SuccessPathDecisions, fs.StreamRate)
			}
			switch sc {
			case Outage:
				if fs.AfterDetection > 0.1 {
					t.Errorf("amplification after detection %.2f > 0.1", fs.AfterDetection)
				}
			case Quota:
				if fs.Throttled > 0.05 || fs.QuotaUsed < 0.95 {
					t.Errorf("%.3f of attempts throttled, %.2f of the quota used; want ≤ 0.05 and ≥ 0.95", fs.Throttled, fs.QuotaUsed)
				}
			}
		})
	}
}

// Recovery after a full outage, over seeds 1–20 (one run's recovery
// depends on where in the breaker's cycle the provider comes back): a
// median ≤ 5 s and no seed above 10 s; after a quota lifts, ≤ 10 s every
// seed. The seeds run in parallel.
func TestStreamRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("20 seeds: checked without -short (make sim-goals)")
	}
	skipUnderRace(t)
	for _, life := range []int{0, 3} {
		t.Run("life="+LifeName(life), func(t *testing.T) {
			t.Parallel()
			outage, quota, afterDetection, herd := make([]float64, 20), make([]float64, 20), make([]float64, 20), make([]float64, 20)
			var wg sync.WaitGroup
			for i := range outage {
				wg.Add(1)
				go func() {
					defer wg.Done()
					o := quiet(t, Outage, PolicyFleetStream, life, uint64(i+1))
					outage[i], afterDetection[i], herd[i] = o.TTR, o.AfterDetection, o.Herd
					quota[i] = quiet(t, Quota, PolicyFleetStream, life, uint64(i+1)).TTR
				}()
			}
			wg.Wait()
			// The goal is 0.1; the breaker's trip on the last seconds meets
			// it on 39 of the 40 runs of seeds 1–20 (one 0.11:
			// docs/fleet-simulation.md, "Goals not met").
			// The busiest second after the outage: ≤ 2 × its baseline as the
			// median of seeds 1–20 (1.85 and 1.79 ×: release slots for the
			// parked clients only, front-loaded); single seeds reach 2.05 ×
			// (docs/fleet-simulation.md, "Goals not met").
			byHerd := slices.Sorted(slices.Values(herd))
			if med := (byHerd[9] + byHerd[10]) / 2; med > 2 || byHerd[19] > 2.1 {
				t.Errorf("outage: busiest second over seeds 1–20 %v: median %.2f, worst %.2f; want ≤ 2 and ≤ 2.1", herd, med, byHerd[19])
			}
			if worst := slices.Max(afterDetection); worst > 0.11 {
				t.Errorf("outage: amplification after detection over seeds 1–20 %v: worst %.2f; want ≤ 0.11", afterDetection, worst)
			}
			for i, q := range quota {
				if q > 10 {
					t.Errorf("quota, seed %d: recovery %v s after the limit lifted; want ≤ 10", i+1, q)
				}
			}
			sorted := slices.Clone(outage)
			slices.Sort(sorted)
			if med := (sorted[9] + sorted[10]) / 2; med > 5 || sorted[19] > 10 {
				t.Errorf("outage: recovery over seeds 1–20 %v: median %v s, worst %v s; want ≤ 5 and ≤ 10", outage, med, sorted[19])
			}
		})
	}
}

// quiet is simulate without logging and without the reference run, for
// runs on other goroutines.
func quiet(t *testing.T, scenario, pol string, life int, seed uint64) *Result {
	sc, err := NewScenario(scenario, DefaultTiming)
	if err != nil {
		t.Error(err)
		return &Result{}
	}
	p, err := NewPolicy(pol)
	if err != nil {
		t.Error(err)
		return &Result{}
	}
	res, err := Run(Config{Scenario: sc, Policy: p, Agents: agents, Life: life, Seed: seed, NoReference: true})
	if err != nil {
		t.Error(err)
		return &Result{}
	}
	return res
}

// With 2,000 agents the busiest second of a healthy fleet is ≈ 1.2 × its
// mean, so the herd goal (≤ 1.5 × baseline) can be checked as stated.
func TestHerdAtScale(t *testing.T) {
	skipUnderRace(t)
	sc, err := NewScenario(Herd, DefaultTiming)
	if err != nil {
		t.Fatal(err)
	}
	for _, pol := range []string{PolicyFleetStream, PolicyFleet, PolicyStateless} {
		p, err := NewPolicy(pol)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Run(Config{Scenario: sc, Policy: p, Agents: 2000, Life: 0, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Log(res.Line())
		if pol != PolicyStateless && (res.Herd > 1.5 || res.HerdRef > 1.3) {
			t.Errorf("2,000 agents: herd %.2f × baseline (healthy %.2f); want ≤ 1.5", res.Herd, res.HerdRef)
		}
		if pol == PolicyStateless && res.Herd < 3 {
			t.Errorf("2,000 agents, stateless: herd %.2f; the contrast is gone", res.Herd)
		}
	}
}

// Every anchor's model runs every scenario, for both lifetimes, and behaves
// as its defaults say in a full outage.
func TestBaselinesRun(t *testing.T) {
	skipUnderRace(t)
	for _, pol := range []string{PolicySDK, PolicyGeminiCLI, PolicyAWSStandard, PolicyGRPCA6} {
		for _, sc := range ScenarioNames {
			for _, life := range []int{0, 3} {
				res := simulate(t, sc, pol, life, 1)
				if res.Calls == 0 || res.Goodput <= 0 || math.IsNaN(res.Amplification) {
					t.Errorf("%s: no calls or no goodput", res.Line())
				}
				if pol != PolicyGeminiCLI && res.Decisions != 0 {
					t.Errorf("%s: %d daemon decisions from an in-process model", res.Line(), res.Decisions)
				}
				if sc != Outage {
					continue
				}
				// The attempt caps bound amplification: 3 attempts (SDK, AWS),
				// 10 (gemini-cli), 5 with A6's throttle.
				limit := map[string]float64{PolicySDK: 3, PolicyAWSStandard: 3, PolicyGeminiCLI: 10, PolicyGRPCA6: 5}[pol]
				if res.Amplification > limit || res.Amplification < 1.2 {
					t.Errorf("%s: amplification %.2f outside [1.2, %v]", res.Line(), res.Amplification, limit)
				}
			}
		}
	}
}

// The same seed gives the same run; another seed, another run.
func TestDeterministic(t *testing.T) {
	for _, pol := range []string{PolicyFleet, PolicyGRPCA6} {
		a := simulate(t, Outage, pol, 3, 7)
		b := simulate(t, Outage, pol, 3, 7)
		if a.Line() != b.Line() || !reflect.DeepEqual(a.PerSecond, b.PerSecond) || !reflect.DeepEqual(a.Fleet, b.Fleet) {
			t.Errorf("%s: two runs of seed 7 differ:\n%s\n%s", pol, a.Line(), b.Line())
		}
		c := simulate(t, Outage, pol, 3, 8)
		if reflect.DeepEqual(a.PerSecond, c.PerSecond) {
			t.Errorf("%s: seeds 7 and 8 gave the same run", pol)
		}
	}
}

func TestLineFormat(t *testing.T) {
	r := simulate(t, Quota, PolicySDK, 3, 1)
	line := r.Line()
	for _, want := range []string{"sim: scenario=quota policy=sdk agents=200 life=3 amplification=", " load=", " herd=", " ttr_s=", " goodput=", " loss=", " throttled=", " quota_used=", " rpcs_per_call=- "} {
		if !strings.Contains(line, want) {
			t.Errorf("line %q lacks %q", line, want)
		}
	}
	if r := simulate(t, Partial, PolicyFleet, 0, 1); !strings.Contains(r.Line(), " life=inf ") || !strings.Contains(r.Line(), " unaffected=") {
		t.Errorf("line %q", r.Line())
	}
}

func TestSimPolicyTurnsFallbacksOff(t *testing.T) {
	p, err := SimPolicy()
	if err != nil {
		t.Fatal(err)
	}
	prof := p.Profiles[SimProfile]
	if prof == nil {
		t.Fatal("no sim profile")
	}
	def := p.Profiles["default"]
	for ft, s := range prof.Strategies {
		if s.Fallback != 0 || s.FallbackAfter != 0 {
			t.Errorf("%v: fallback %v after %d", ft, s.Fallback, s.FallbackAfter)
		}
		d := def.Strategies[ft]
		d.Fallback, d.FallbackAfter, d.Name, s.Name = 0, 0, "", ""
		if s != d {
			t.Errorf("%v: %+v differs from default's %+v beyond the fallback", ft, s, d)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	if _, err := NewScenario("nope", DefaultTiming); err == nil {
		t.Error("unknown scenario accepted")
	}
	if _, err := NewPolicy("nope"); err == nil {
		t.Error("unknown policy accepted")
	}
	sc, _ := NewScenario(Outage, DefaultTiming)
	p, _ := NewPolicy(PolicySDK)
	if _, err := Run(Config{Scenario: sc, Policy: p}); err == nil {
		t.Error("0 agents accepted")
	}
}

// skipUnderRace skips a goal test in the race run. A simulation runs in
// one goroutine, so the race detector has nothing to find in it and makes
// it about ten times slower; make sim-goals checks every goal without it.
// The race run keeps the tests whose replicas meet over PostgreSQL, where
// the exchange's goroutines run (TestReplicaGoalsOverPostgres).
func skipUnderRace(t *testing.T) {
	t.Helper()
	if raceEnabled {
		t.Skip("a goal: checked without -race (make sim-goals)")
	}
}
