package fleet

import (
	"fmt"
	"strings"
	"time"
)

// Clearing is what an operator clears on a bucket (Fleet.Clear).
type Clearing struct {
	Hold, Stop, Breaker, Pace bool
}

// All says whether nothing was named: clear everything.
func (c Clearing) all() bool { return !c.Hold && !c.Stop && !c.Breaker && !c.Pace }

func (c Clearing) String() string {
	if c.all() {
		return "hold, stop, breaker and pace"
	}
	var parts []string
	for _, p := range [...]struct {
		on   bool
		name string
	}{{c.Hold, "hold"}, {c.Stop, "stop"}, {c.Breaker, "breaker"}, {c.Pace, "pace"}} {
		if p.on {
			parts = append(parts, p.name)
		}
	}
	return strings.Join(parts, ", ")
}

// Origin is who asked for something: the authenticated identity (the
// tenant, or an operator's) and the peer's address.
type Origin struct{ Identity, Peer string }

// clientKey is the name the breaker counts a distinct client by: its
// authenticated identity and connection when the caller has them, so that
// one process cannot pass for several under made-up client ids; else (a
// caller of the package without a network in between) the client id.
func (o Origin) clientKey(clientID string) string {
	if o.Peer == "" && o.Identity == "" {
		return clientID
	}
	return o.Identity + "@" + o.Peer
}

// Clear clears what c names (everything when nothing) on tenant's bucket
// named name, and journals it as a fleet_clear event with who asked and
// why. A cleared hold or stop ends now; a cleared breaker closes without a
// slow start and its counts restart; a cleared pace forgets the learnt
// request limit and pacing's cut. In a shared fleet the clear reaches the
// other replicas through the Syncer (Verdict.ClearedAt). It returns the
// bucket after the clear, and false when the fleet has no such bucket.
func (f *Fleet) Clear(tenant, name string, c Clearing, who Origin, reason string) (BucketView, bool) {
	now, cfg := f.clock(), f.cfg.Load()
	if c.all() {
		c = Clearing{Hold: true, Stop: true, Breaker: true, Pace: true}
	}
	f.store.lock()
	var b *Bucket
	for _, k := range keysNamed(tenant, name) {
		if b = f.store.get(k, false, now); b != nil {
			break
		}
	}
	if b == nil {
		f.store.unlock()
		return BucketView{}, false
	}
	b.clear(now, c)
	if c.Breaker && b.state != Closed {
		b.state, b.openPeriod, b.probeOK = Closed, 0, 0
		b.closedAt = time.Time{} // no slow start: the operator says the model is fine
		b.moves++
	}
	b.cleared, b.clearedWhat, b.raisedClear = now, c, true
	why := fmt.Sprintf("an operator cleared the %s", c)
	if reason != "" {
		why += ": " + reason
	}
	e := Event{At: now, Key: b.key, Kind: EventCleared, Reason: why, Origin: who}
	v := f.view(cfg, b, now)
	f.store.unlock()
	f.publish([]Event{e}, tenant)
	f.wakeStreams()
	return v, true
}

// clear resets what c names, but the breaker's state (a transition, which
// a shared fleet proposes like any other).
func (b *Bucket) clear(now time.Time, c Clearing) {
	if c.Hold {
		b.holdUntil, b.holdSpan, b.waiters, b.raisedHold = time.Time{}, 0, 0, false
		clear(b.holdSlots)
	}
	if c.Stop {
		b.stopUntil, b.stopWhy, b.raisedStop = time.Time{}, "", false
	}
	if c.Breaker {
		b.window.reset()
		b.successes.reset()
		clear(b.clients)
		b.lastCounted = time.Time{}
		for id, r := range b.remote {
			r.Failures, r.Successes, r.Clients = 0, 0, nil
			b.remote[id] = r
		}
	}
	if c.Pace {
		b.limits, b.left, b.cut, b.cutAt = [limitKinds]learntLimit{}, [limitKinds]limitLeft{}, 0, time.Time{}
		b.paceWhyKey, b.paceWhyText = paceWhyKey{}, ""
		for id, r := range b.remote {
			r.RequestsPerMinute, r.InputTokensPerMinute, r.OutputTokensPerMinute = 0, 0, 0
			b.remote[id] = r
		}
	}
}

// Bits is c as the exchange stores it: 1 hold, 2 stop, 4 breaker, 8 pace.
func (c Clearing) Bits() int16 {
	var b int16
	for i, on := range [...]bool{c.Hold, c.Stop, c.Breaker, c.Pace} {
		if on {
			b |= 1 << i
		}
	}
	return b
}

// ClearingOf is the Clearing of bits (Bits).
func ClearingOf(bits int16) Clearing {
	return Clearing{Hold: bits&1 != 0, Stop: bits&2 != 0, Breaker: bits&4 != 0, Pace: bits&8 != 0}
}

// adoptClear applies another replica's clear when it is newer than the
// last this bucket took (the breaker's state comes as a transition).
func (b *Bucket) adoptClear(v Verdict, now time.Time) bool {
	if v.ClearedAt.IsZero() || !v.ClearedAt.After(b.cleared) {
		return false
	}
	c := v.Cleared
	// A hold or stop raised after the clear, on any replica, stays.
	keepHold, keepStop := b.holdUntil.Equal(v.HoldUntil), b.stopUntil.Equal(v.StopUntil)
	hold, span, stop, why := b.holdUntil, b.holdSpan, b.stopUntil, b.stopWhy
	b.clear(now, c)
	if c.Hold && keepHold && !v.HoldUntil.IsZero() {
		b.holdUntil, b.holdSpan = hold, span
	}
	if c.Stop && keepStop && !v.StopUntil.IsZero() {
		b.stopUntil, b.stopWhy = stop, why
	}
	b.cleared, b.clearedWhat = v.ClearedAt, c
	return true
}
