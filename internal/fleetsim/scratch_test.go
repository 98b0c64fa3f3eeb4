package fleetsim

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestScratch(t *testing.T) {
	scs := strings.Split(os.Getenv("SC"), ",")
	pols := strings.Split(os.Getenv("POL"), ",")
	for _, sn := range scs {
		sc, _ := NewScenario(sn, DefaultTiming)
		for _, life := range []int{0, 3} {
			for _, pn := range pols {
				p, err := NewPolicy(pn)
				if err != nil {
					t.Fatal(err)
				}
				res, err := Run(Config{Scenario: sc, Policy: p, Agents: 200, Life: life, Seed: 1})
				if err != nil {
					t.Fatal(err)
				}
				fmt.Println(res.Line(), res.Fleet)
				if os.Getenv("SERIES") != "" {
					fmt.Println(res.PerSecond[50:150])
				}
			}
		}
	}
}
