package fleetsim

import (
	"math"
	"reflect"
	"sort"
	"strings"
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
	for _, life := range []int{0, 3} {
		t.Run("life="+LifeName(life), func(t *testing.T) {
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
			// Full outage, after at most 5 s of detection: about one probe a
			// second for the whole fleet.
			if a := res[Outage].AfterDetection; a > 0.1 {
				t.Errorf("outage: amplification after detection %.2f > 0.1", a)
			}
			// An unaffected bucket loses < 2 % goodput.
			if u := res[Partial].Unaffected; u < 0.98 {
				t.Errorf("partial: the unaffected model keeps %.3f of its goodput; want ≥ 0.98", u)
			}
			// A shared quota at 1.6× its limit: ≤ 5 % 429s, ≥ 90 % used.
			if q := res[Quota]; q.Throttled > 0.05 || q.QuotaUsed < 0.90 {
				t.Errorf("quota: %.3f of attempts throttled, %.2f of the quota used; want ≤ 0.05 and ≥ 0.90", q.Throttled, q.QuotaUsed)
			}
			// policyd killed mid-outage: the processes admit their first
			// attempts past their expired assignments (policyd away never
			// stops an agent), and the fleet still sends fewer attempts than
			// stateless clients (which never gate).
			r := res[Restart]
			if r.OwnAdmitted == 0 {
				t.Errorf("restart: no first attempt admitted past an expired assignment")
			}
			if st := simulate(t, Restart, PolicyStateless, life, 1); r.DaemonDown >= st.DaemonDown {
				t.Errorf("restart: amplification while policyd is down %.2f, stateless %.2f", r.DaemonDown, st.DaemonDown)
			}
		})
	}
}

// Recovery to 95 % goodput within 2 open periods, as the median of five
// seeds: one run's recovery depends on where in the breaker's cycle the
// provider comes back (docs/fleet-simulation.md shows the spread).
func TestStreamRecovery(t *testing.T) {
	openPeriods := 2 * fleet.Defaults().Breaker.OpenFor.Seconds()
	var ttr []float64
	for seed := uint64(1); seed <= 5; seed++ {
		ttr = append(ttr, simulate(t, Outage, PolicyFleetStream, 0, seed).TTR)
	}
	sort.Float64s(ttr)
	if ttr[2] > openPeriods {
		t.Errorf("outage: median recovery %v s over seeds 1–5 (%v); want ≤ %v", ttr[2], ttr, openPeriods)
	}
}

// With 2,000 agents the busiest second of a healthy fleet is ≈ 1.2 × its
// mean, so the herd goal (≤ 1.5 × baseline) can be checked as stated.
func TestHerdAtScale(t *testing.T) {
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
