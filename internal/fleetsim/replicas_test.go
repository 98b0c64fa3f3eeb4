package fleetsim

import (
	"context"
	"math"
	"testing"

	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/fleet/fleettest"
	"github.com/policyd/policyd/internal/fleet/pgexchange"
	"github.com/policyd/policyd/internal/journal/journaltest"
)

func TestMain(m *testing.M) { journaltest.Main(m) }

// postgresExchanges gives each run a fresh database with the journal's
// schema and n real exchanges on it: the replicas meet in PostgreSQL, as
// the daemon's do.
func postgresExchanges(t *testing.T) func(n int) ([]fleet.Exchange, func(), error) {
	return func(n int) ([]fleet.Exchange, func(), error) {
		return pgexchange.OpenN(context.Background(), journaltest.DatabaseURL(t), n)
	}
}

// within says whether got is within 10 % of want, or 0.01 of it for
// fractions (an amplification of 0.07 is noise at ±0.007).
func within(got, want float64) bool {
	return math.Abs(got-want) <= max(0.1*math.Abs(want), 0.01)
}

// The replicas' goal: three replicas behind a per-call balancer, sharing
// the fleet through an exchange, score within 10 % of one replica in the
// outage, shared-quota, herd, partial and restart scenarios (after a
// restart, the busiest second within 20 %: the restarted replicas do not
// know the traffic before the outage and release their parked calls over
// the longest window). The exchange is the in-memory
// one, which meets the PostgreSQL exchange's contract
// (fleettest.ExerciseExchange); TestReplicaGoalsOverPostgres runs one
// scenario over a real PostgreSQL, as the daemon's replicas meet.
func TestReplicaGoals(t *testing.T) {
	skipUnderRace(t)
	replicaGoals(t, fleettest.Exchanges, []string{PolicyFleet, PolicyFleetStream}, []string{Outage, Quota, Herd, Partial, Restart})
}

func TestReplicaGoalsOverPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	replicaGoals(t, postgresExchanges(t), []string{PolicyFleetStream}, []string{Outage})
}

func replicaGoals(t *testing.T, exchanges func(n int) ([]fleet.Exchange, func(), error), policies, scenarios []string) {
	for _, pol := range policies {
		for _, name := range scenarios {
			t.Run(pol+"/"+name, func(t *testing.T) {
				sc, err := NewScenario(name, DefaultTiming)
				if err != nil {
					t.Fatal(err)
				}
				var res [2]*Result
				for i, n := range []int{1, 3} {
					p, err := NewPolicy(pol)
					if err != nil {
						t.Fatal(err)
					}
					res[i], err = Run(Config{Scenario: sc, Policy: p, Agents: agents, Seed: 1, Replicas: n, Exchanges: exchanges})
					if err != nil {
						t.Fatal(err)
					}
					t.Log(res[i].Line())
				}
				one, three := res[0], res[1]
				if three.Replicas != 3 || !containsField(three.Line(), "replicas=3") {
					t.Fatalf("the line does not say replicas=3: %s", three.Line())
				}
				check := func(what string, got, want float64) {
					if !within(got, want) {
						t.Errorf("%s: %s with 3 replicas %.3f, with 1 %.3f; want within 10 %%", name, what, got, want)
					}
				}
				check("goodput", three.Goodput, one.Goodput)
				switch name {
				case Outage:
					// Fewer attempts is no shortfall (goodput and loss are checked
					// above): the replicas trip the breaker on the fleet's last
					// seconds, a second late, and send a little less.
					if three.Amplification > 1.1*one.Amplification {
						t.Errorf("%s: amplification with 3 replicas %.3f, with 1 %.3f; want no more than 10 %% above", name, three.Amplification, one.Amplification)
					}
					// A ratio of a few dozen attempts to the few hundred calls
					// that start while the others are parked: ±0.03 is a
					// probe or two (docs/fleet-simulation.md).
					if math.Abs(three.AfterDetection-one.AfterDetection) > max(0.1*one.AfterDetection, 0.03) {
						t.Errorf("outage: amplification after detection with 3 replicas %.3f, with 1 %.3f; want within 0.03", three.AfterDetection, one.AfterDetection)
					}
				case Quota:
					check("quota used", three.QuotaUsed, one.QuotaUsed)
					if pol == PolicyFleetStream && three.Throttled > 0.05 {
						t.Errorf("quota: %.3f of attempts throttled with 3 replicas; want ≤ 0.05", three.Throttled)
					}
				case Herd:
					check("herd", three.Herd, one.Herd)
				case Partial, Restart:
					if three.Loss > one.Loss+0.01 {
						t.Errorf("%s: loss with 3 replicas %.3f, with 1 %.3f; want ≤ +0.01", name, three.Loss, one.Loss)
					}
					if name == Partial {
						check("unaffected model's goodput", three.Unaffected, one.Unaffected)
					} else if three.Herd > 1.2*one.Herd {
						t.Errorf("restart: busiest second after the outage with 3 replicas %.2f ×, with 1 %.2f ×; want within 20 %%", three.Herd, one.Herd)
					}
				}
			})
		}
	}
}

func containsField(line, field string) bool {
	for _, f := range splitFields(line) {
		if f == field {
			return true
		}
	}
	return false
}

func splitFields(s string) []string {
	var out []string
	start := -1
	for i, r := range s + " " {
		if r == ' ' {
			if start >= 0 {
				out = append(out, s[start:i])
				start = -1
			}
		} else if start < 0 {
			start = i
		}
	}
	return out
}
