package fleetsim

import "testing"

func TestDbg(t *testing.T) {
	sc2, _ := NewScenario(Quota, DefaultTiming)
	p, _ := NewPolicy(PolicyFleetStream)
	res, _ := Run(Config{Scenario: sc2, Policy: p, Agents: 200, Seed: 1})
	t.Log(res.Line())
	for s := 55; s < 200; s++ {
		t.Logf("%d att=%d good=%d parked=%d", s, res.PerSecond[s], res.GoodPerSecond[s], res.Parked[s])
	}
}
