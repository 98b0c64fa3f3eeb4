package policyd

import (
	"time"

	policydv1 "github.com/policyd/policyd/clients/go/internal/gen/policyd/v1"
)

var policydv1BreakerNames = policydv1.BreakerState_name

// GateState is what the fleet gate holds for call's target, for the tests
// in package policyd_test: the assignment's breaker ("CLOSED", "OPEN",
// "HALF_OPEN"), its hold, and whether there is one at all.
func GateState(c *Client, call Call) (breaker string, hold time.Duration, ok bool) {
	t, gated := targetOf(call)
	if !gated || c.gate == nil {
		return "", 0, false
	}
	c.gate.mu.Lock()
	defer c.gate.mu.Unlock()
	e, found := c.gate.entries[t]
	if !found || e.a == nil {
		return "", 0, false
	}
	return enumName(policydv1BreakerNames, int32(e.a.breaker), "BREAKER_STATE_"), e.a.hold, true
}

// StreamStarted says whether c opened (or tried to open) its fleet stream.
func StreamStarted(c *Client) bool {
	c.coordMu.Lock()
	defer c.coordMu.Unlock()
	return c.coord != nil
}

// GateOff says whether c's gate was turned off by policyd's answer.
func GateOff(c *Client) bool {
	if c.gate == nil {
		return true
	}
	c.gate.mu.Lock()
	defer c.gate.mu.Unlock()
	return c.gate.off
}

// GateCounts is what the gate counted for a target since its last report,
// for the tests in package policyd_test.
type GateCounts struct {
	Admitted, Succeeded, Failed, Retries uint64
	FirstInputTokens, RetryInputTokens   uint64
	InFlight                             uint64
	RateLimits                           map[string]string
}

// GateUsage is the gate's counts for call's target (ok false: no row).
func GateUsage(c *Client, call Call) (GateCounts, bool) {
	t, gated := targetOf(call)
	if !gated || c.gate == nil {
		return GateCounts{}, false
	}
	c.gate.mu.Lock()
	defer c.gate.mu.Unlock()
	e, found := c.gate.entries[t]
	if !found {
		return GateCounts{}, false
	}
	u := e.u
	return GateCounts{Admitted: u.admitted, Succeeded: u.succeeded, Failed: u.failed, Retries: u.retries,
		FirstInputTokens: u.firstInputTokens, RetryInputTokens: u.retryInputTokens, InFlight: e.inFlight, RateLimits: u.rateLimits}, true
}
