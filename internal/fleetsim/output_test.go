package fleetsim

import (
	"fmt"
	"math"
	"testing"

	"github.com/policyd/policyd/internal/fleet/fleettest"
)

// outputSeeds are the seeds the output goals are met over: the 429s of a
// paced run come from the pace's probing (AIMD rises to the whole limit
// until a 429 cuts it) and, with three replicas, from each replica seeing
// the others' demand a second late, and vary by seed
// (docs/fleet-simulation.md).
var outputSeeds = []uint64{1, 2, 3, 4, 5}

// tokenSeeds are the seeds the tokens goals are met over, for the same
// reasons as outputSeeds.
var tokenSeeds = []uint64{1, 2, 3, 4, 5}

// Pacing on output tokens (the output scenario: outputs of 100–10 k tokens
// at twice a key's output-token limit, Anthropic's headers), with one and
// three replicas sharing the fleet, both lifetimes, over outputSeeds: ≤ 2
// % of attempts throttled and ≥ 90 % of the limit used in every run, no
// more calls lost than the seed's best baseline (+0.01), at least 0.9 of
// its output tokens and 0.8 of its calls served.
func TestOutputGoals(t *testing.T) {
	checkPacingGoals(t, Output, outputSeeds, "output tokens", func(r *Result) float64 { return r.OutputGoodput })
}

// checkPacingGoals runs a pacing scenario (tokens or output) over seeds,
// both lifetimes, with one and three replicas sharing the fleet: in every
// run ≤ 2 % of attempts throttled, ≥ 90 % of the limit used, no more calls
// lost than the seed's best baseline (+0.01), at least 0.9 of its tokens
// served (served: the run's tokens a second) and 0.8 of its calls, and no
// decision on the success path.
func checkPacingGoals(t *testing.T, scenario string, seeds []uint64, tokens string, served func(*Result) float64) {
	skipUnderRace(t)
	sc, err := NewScenario(scenario, DefaultTiming)
	if err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, pol string, life, replicas int, seed uint64) *Result {
		p, err := NewPolicy(pol)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Run(Config{Scenario: sc, Policy: p, Agents: agents, Life: life, Seed: seed, Replicas: replicas,
			Exchanges: fleettest.Exchanges, NoReference: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("seed %d: %s", seed, res.Line())
		return res
	}
	type best struct{ loss, tokens, calls float64 }
	bests := map[uint64]best{}
	for _, seed := range seeds {
		b := best{loss: math.Inf(1)}
		for _, pol := range baselines {
			r := run(t, pol, 0, 1, seed)
			b = best{min(b.loss, r.Loss), max(b.tokens, served(r)), max(b.calls, r.Goodput)}
		}
		bests[seed] = b
	}
	for _, life := range []int{0, 3} {
		for _, replicas := range []int{1, 3} {
			t.Run(fmt.Sprintf("life=%s/replicas=%d", LifeName(life), replicas), func(t *testing.T) {
				const throttledMax = 0.02
				for _, seed := range seeds {
					r, b := run(t, PolicyFleetStream, life, replicas, seed), bests[seed]
					if r.Throttled > throttledMax || r.QuotaUsed < 0.9 {
						t.Errorf("seed %d: %.3f of attempts throttled, %.2f of the limit used; want ≤ %.3f and ≥ 0.9", seed, r.Throttled, r.QuotaUsed, throttledMax)
					}
					if r.Loss > b.loss+0.01 {
						t.Errorf("seed %d: loss %.3f, the best baseline's %.3f; want ≤ +0.01", seed, r.Loss, b.loss)
					}
					if served(r) < 0.9*b.tokens || r.Goodput < 0.8*b.calls {
						t.Errorf("seed %d: %.1f k %s and %.2f calls a second served, the best baselines' %.1f k and %.2f; want ≥ 0.9 × and ≥ 0.8 ×",
							seed, served(r), tokens, r.Goodput, b.tokens, b.calls)
					}
					if r.SuccessPathDecisions != 0 {
						t.Errorf("seed %d: %d decisions on the success path", seed, r.SuccessPathDecisions)
					}
				}
			})
		}
	}
}
