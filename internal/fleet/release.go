package fleet

import (
	"fmt"
	"math"
	"time"
)

// Parked calls and their release. A streamed client's gate parks first
// attempts (and retries) that meet an open breaker, a probing one or a
// pace, and reports how many it holds. The daemon wakes them: while the
// breaker probes, it hands probe permits to clients that hold parked calls;
// when it closes, it gives every client a release slot spread over a window
// sized so that the backlog drains at ReleaseFactor times the traffic the
// bucket had before the incident.

// ReleaseFactor is the release rate after a close, as a multiple of the
// first attempts a second the bucket admitted before its breaker opened:
// the backlog drains a fifth faster than the fleet's own pace. Faster
// recovers sooner and makes the provider's busiest second after the
// incident busier: docs/fleet-simulation.md measures both (at 1.2, a
// median of 5 s and of 2.0 × the baseline over seeds 1–20).
const ReleaseFactor = 1.2

// PaceReleaseFactor is ReleaseFactor for the calls a pace parked, released
// when its limit expires. The release window's slots come on top of the
// agents the pace did not park, which arrive at their usual rate from the
// first second, so the backlog drains at less than the bucket's traffic
// before the pace: measured in the simulation (quota, seeds 1–20, both
// lifetimes), the busiest second after the pace at most 1.98 × the
// baseline at 0.6 (with LimitTTL 3 s; at 1.2 and 5 s, 2.06–2.44 × over
// seeds 1–10), recovery within 9 s, and as many calls completed (0.983–
// 0.995 of the best baseline's, seeds 1–10). Draining the backlog by grants instead,
// every new call waiting its turn, met the same busiest second but cost
// calls (0.96 of the best baseline's with processes of three calls).
const PaceReleaseFactor = 0.6

// parkedReopen is the open period after a failed probe, in probe
// intervals, while clients hold parked calls (bucket.reopenPeriod).
const parkedReopen = 5

// maxRelease bounds the release window: a backlog that would take longer
// drains faster than ReleaseFactor rather than keep calls parked.
const maxRelease = 10 * time.Second

// parkState is a bucket's view of its parked calls.
type parkState struct {
	parkedBy     map[string]int64 // each streamed client's last reported count
	parkedSum    int64            // their sum
	baseRate     float64          // first attempts a second before the breaker opened
	releaseFrom  time.Time        // the last close, or a pace's end
	releaseSpan  time.Duration    // the release window from releaseFrom
	releaseSlots map[string]int
	// releasePaced: the release follows a pace (startRelease).
	releasePaced bool
	nextPermit   time.Time
}

// reportParked records client's parked calls.
func (b *Bucket) reportParked(client string, n int64) {
	if n == 0 && b.parkedBy == nil {
		return
	}
	if b.parkedBy == nil {
		b.parkedBy = make(map[string]int64)
	}
	b.parkedSum -= b.parkedBy[client]
	if n == 0 {
		delete(b.parkedBy, client)
		return
	}
	if _, ok := b.parkedBy[client]; ok || len(b.parkedBy) < maxHoldSlots {
		b.parkedBy[client] = n
		b.parkedSum += n
	}
}

func (b *Bucket) parkedTotal() int64 { return b.parkedSum }

// fleetParked is the parked calls of the whole fleet: this replica's
// streams' and, from the counts exchanged, the other replicas' (as of
// their last second).
func (b *Bucket) fleetParked(now time.Time) int64 {
	n := b.parkedTotal()
	if len(b.remote) > 0 {
		n += b.others(now).parked
	}
	return n
}

// noteBaseRate remembers the admitted first attempts a second as a closed
// breaker opens or a pace starts: the traffic the release after the
// incident is paced by.
func (b *Bucket) noteBaseRate(now time.Time, c *BreakerConfig) {
	if b.admitted.secs == nil {
		return
	}
	if r := float64(int64(b.admitted.sum(now))+b.others(now).admitted) / c.Window.Seconds(); r > 0 {
		b.baseRate = r
	}
}

// startRelease sizes the release window at a close or a pace's end, for
// the backlog to drain at factor × the traffic before the incident (over
// maxRelease when that traffic is unknown).
// A slot goes to each client whose reports said it held parked calls and,
// after a pace (paced), to each client the pace parked calls of: it parked
// every new call until it ended, so a client whose last report (up to a
// second old) said none may hold the calls of its last second, and
// released at once they would meet the backlog's slots (the quota
// simulation's busiest second after the pace, seeds 1–10: at most 1.97 ×
// the baseline so, 2.84 × slotting only the clients that reported parked
// calls). Other clients' calls come at their own rate: slotted, they
// waited for a release that was not theirs (the busiest second after the
// outage, seeds 1–10, at most 2.31 × slotting every client, 2.20 × the
// parked ones; partial 2.46 and 2.29 ×; as many calls completed, and with
// processes of three calls 0.2 % more after a pace).
func (b *Bucket) startRelease(at time.Time, factor float64, paced bool) {
	b.releaseFrom, b.releaseSpan, b.releaseSlots, b.releasePaced = at, 0, nil, paced
	n := b.fleetParked(at)
	if n == 0 {
		return
	}
	if b.baseRate <= 0 {
		// The traffic before the incident is unknown here: this replica
		// started after the breaker opened (a restart, or a new replica
		// that took the open state from the others). Released at once, its
		// parked calls met the provider in one second (restart, three
		// replicas, seeds 1–5: the busiest second after the outage up to
		// 3.7 × the baseline, against 2.3 × spread over maxRelease).
		b.releaseSpan = maxRelease
		return
	}
	b.releaseSpan = min(maxRelease, time.Duration(float64(n)/(factor*b.baseRate)*float64(time.Second)))
}

// releaseHold is client's wait for its release slot after a close or a
// pace's end (0: none).
func (f *Fleet) releaseHold(b *Bucket, client string, now time.Time) time.Duration {
	if b.state != Closed || b.releaseSpan <= 0 || !now.Before(b.releaseFrom.Add(b.releaseSpan)) {
		return 0
	}
	if b.parkedBy[client] == 0 && (!b.releasePaced || b.grants.clients[client] == nil) {
		return 0 // the client's calls come at their own rate
	}
	i, ok := b.releaseSlots[client]
	if !ok {
		i = len(b.releaseSlots)
		if b.releaseSlots == nil {
			b.releaseSlots = make(map[string]int)
		}
		if len(b.releaseSlots) < maxHoldSlots {
			b.releaseSlots[client] = i
		}
	}
	curve := closeReleaseCurve
	if b.releasePaced {
		curve = paceReleaseCurve
	}
	return max(0, b.releaseFrom.Add(releaseOffset(f.slot(i, b.releaseSpan), b.releaseSpan, curve)).Sub(now))
}

// The release curves front-load a release window: a slot at share u of
// the window (its van der Corput point) is released at u^curve of it, so
// that more parked calls go early, while the agents the incident did not
// park have not come back to their usual rate, and fewer late, when they
// have. Measured in the simulation: after a close, where only the clients
// holding parked calls take slots, at 1.15 the busiest second after the
// outage (seeds 1–20) has a median of 1.85 × its baseline and a worst of
// 2.05 × (at 1.3: 1.98 and 2.30 ×; at 1.1: 1.90 and 2.09 ×), partial's
// worst 2.34 × (2.59), restart's 2.03 × (2.07), for as many calls
// completed; after a pace, where every client the pace parked takes one,
// 1.3 (quota, seeds 1–10: at most 1.97 ×, against 2.07 × at 1.15).
const (
	closeReleaseCurve = 1.15
	paceReleaseCurve  = 1.3
)

// releaseOffset is the front-loaded offset of a slot at offset d of a
// release window, by curve.
func releaseOffset(d, window time.Duration, curve float64) time.Duration {
	if window <= 0 {
		return d
	}
	return time.Duration(math.Pow(float64(d)/float64(window), curve) * float64(window))
}

// probePermit says whether client gets the probing breaker's permit now:
// one every ProbeInterval, to a client holding parked calls (a real call
// that was waiting anyway), so that while the provider is back the probes
// that close the breaker follow each other a second apart. Replicas take
// the intervals in turn (their slot rank), each for its own streams.
func (f *Fleet) probePermit(b *Bucket, client string, now time.Time, c *BreakerConfig) bool {
	if b.state != HalfOpen || b.parkedBy[client] == 0 || now.Before(b.nextPermit) {
		return false
	}
	k := int64(now.Sub(b.halfOpenAt) / c.ProbeInterval)
	if stride := int64(f.slotStride.Load()); stride > 1 && k%stride != int64(f.slotOffset.Load()) {
		return false
	}
	b.nextPermit = b.halfOpenAt.Add(time.Duration(k+1) * c.ProbeInterval)
	return true
}

// parkHint is the daemon's estimate of how long a gate's parked call
// waits: the open period's rest and a probe interval and latency, or a
// probe interval while probing.
func (b *Bucket) parkHint(now time.Time, c *BreakerConfig) time.Duration {
	switch b.state {
	case Open:
		return b.openUntil.Sub(now) + c.ProbeInterval
	case HalfOpen:
		return c.ProbeInterval
	}
	return 0
}

func (b *Bucket) releaseWhy(hold time.Duration) string {
	return fmt.Sprintf("parked calls released over %v: this client's slot in %v", b.releaseSpan.Round(100*time.Millisecond), hold.Round(100*time.Millisecond))
}
