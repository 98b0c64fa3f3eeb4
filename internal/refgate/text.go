package refgate

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/policyd/policyd/internal/fleet"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

// What the caller sees of a first attempt the gate did not admit
// (docs/clients.md, "What the caller sees"): the sentence of the
// decision's stop text and the decision's fleet fields. The three clients
// render the same, and clients/testdata/gate.json pins both.

// BudgetText is the stop text of a retry the process's own budget refused.
func BudgetText(target string) string {
	return "policyd is unreachable and this process's own retry budget for " + target + " is spent"
}

// Text is the stop text of v, a verdict that did not admit a first attempt
// to target at now: what the fleet does, then the assignment's reason.
func (g *Gate) Text(now time.Time, target string, v Verdict) string {
	if v.Waited > 0 && v.StopReason == policydv1.StopReason_STOP_REASON_DEADLINE && strings.HasPrefix(v.Reason, "gave up waiting") {
		return v.Reason // a parked call whose deadline can no longer be met
	}
	a := g.a
	if a == nil {
		return ""
	}
	age := now.Sub(g.receivedAt)
	var s string
	switch v.StopReason {
	case policydv1.StopReason_STOP_REASON_FLEET_STOP:
		s = fmt.Sprintf("the fleet stopped calls to %s for another %s", target, seconds(a.Stop-age))
	case policydv1.StopReason_STOP_REASON_CIRCUIT_OPEN:
		if a.Breaker == fleet.HalfOpen {
			s = fmt.Sprintf("the fleet's circuit breaker for %s is half-open and this process has no probe permit left", target)
		} else {
			s = fmt.Sprintf("the fleet's circuit breaker for %s is open", target)
		}
	case policydv1.StopReason_STOP_REASON_FLEET_SHED:
		if v.AtLease {
			s = fmt.Sprintf("this process has %d requests in flight to %s, its lease of the fleet's cap", g.InFlight, target)
			break
		}
		share, class := a.AdmitFraction, ""
		if v.BatchShare {
			share, class = *a.BatchAdmitFraction, "batch "
		}
		s = fmt.Sprintf("the fleet admits %d%% of %sfirst attempts to %s, not this one", int(math.Floor(share*100+0.5)), class, target)
	case policydv1.StopReason_STOP_REASON_DEADLINE:
		s = fmt.Sprintf("the fleet holds first attempts to %s for another %s, past the deadline", target, seconds(a.Hold-age))
	default:
		s = "the fleet did not admit a first attempt to " + target
	}
	if a.Reason != "" {
		s += ": " + a.Reason
	}
	return s
}

// FleetFields are a gate decision's fleet fields at now.
type FleetFields struct {
	Breaker                      fleet.BreakerState
	Stopped                      bool
	HoldRemaining, OpenRemaining time.Duration
	Reason                       string
}

// Fields returns the fleet fields of v at now.
func (g *Gate) Fields(now time.Time, v Verdict) FleetFields {
	a := g.a
	if a == nil {
		return FleetFields{}
	}
	age := now.Sub(g.receivedAt)
	return FleetFields{Breaker: a.Breaker, Stopped: v.StopReason == policydv1.StopReason_STOP_REASON_FLEET_STOP,
		HoldRemaining: max(0, a.Hold-age), OpenRemaining: max(0, a.Stop-age), Reason: a.Reason}
}

// seconds renders d as the texts do: seconds with one decimal ("4.0 s").
func seconds(d time.Duration) string { return fmt.Sprintf("%.1f s", max(0, d).Seconds()) }
