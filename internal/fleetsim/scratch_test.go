package fleetsim

import (
	"fmt"
	"testing"
)

func TestScratch(t *testing.T) {
	for _, sn := range ScenarioNames {
		sc, _ := NewScenario(sn, DefaultTiming)
		for _, life := range []int{0, 3} {
			for _, pn := range PolicyNames {
				p, err := NewPolicy(pn)
				if err != nil {
					t.Fatal(err)
				}
				res, err := Run(Config{Scenario: sc, Policy: p, Agents: 200, Life: life, Seed: 1})
				if err != nil {
					t.Fatal(err)
				}
				fmt.Println(res.Line(), res.Fleet)
			}
		}
	}
}
