package fleet

import (
	"time"
)

// Pace grants: how a paced bucket's room reaches the gates. Were every
// gate to draw for each of its calls against the pace's share, the
// admitted second would be a sum of a fleet's independent draws: binomial,
// about 9 ± 3 attempts for a provider's 10 a second, so that a busy second
// meets 429s and a quiet second's room is lost, and the provider's limit
// is never used whole (78–94 % of it in the quota scenario). Instead the
// daemon grants first attempts one at a time, at the pace's rate, to the
// clients holding parked calls, the longest parked first; a gate admits a
// first attempt only against a grant it has not used, and parks it
// otherwise. The admitted second is then the pace's rate, give or take
// one, wherever the calls wait.
//
// A grant is counted, not sent: each client's assignment carries the
// running count of grants it was given (PacePermits), and the gate admits
// as many first attempts as the count rose since the last assignment it
// saw. A refresh that repeats a count grants nothing twice; a count that
// went down (another replica's, or one this replica restarted) is a new
// count from zero; the first count a gate sees is what was granted before
// it knew the target, and grants nothing. Batch and interactive calls keep
// their classes' draws (classes.go): a grant does not know a call's class.

// maxGrantDebt is how far the grants' clock may lag now: after a pause
// with nobody to grant to, the grants start again at the pace's rate, not
// with a burst that makes up for the pause.
const maxGrantDebt = 500 * time.Millisecond

// paceGrants is a bucket's grants.
type paceGrants struct {
	next    time.Time // when the next grant is due
	clients map[string]*grantee
}

// grantee is one client's grants.
type grantee struct {
	total uint64 // grants given, in all: the assignment's running count
	// unused: given and not yet seen admitted in the client's reports;
	// the client is owed no more while its parked calls are covered.
	unused int64
	since  time.Time // parked since: the longest parked is granted first
	// grantedAt is when it was last given a grant.
	grantedAt time.Time
}

// lostGrantAfter is how long after its last grant a client that reports
// parked calls and no admission is taken to hold no grant: a gate with one
// admits a parked call as the assignment arrives, and reports it within
// a second. Its grant was lost (a gate made anew takes the first count it
// sees as what it was given before).
const lostGrantAfter = 2 * ParkRecheck

// noteGrantUse takes what a report says of client's grants: first
// attempts admitted use them, and a client that parks again queues again.
func (b *Bucket) noteGrantUse(client string, admitted, parked int64, now time.Time) {
	g := b.grants.clients[client]
	if g == nil {
		if parked == 0 {
			return
		}
		if b.grants.clients == nil {
			b.grants.clients = make(map[string]*grantee)
		}
		if len(b.grants.clients) >= maxHoldSlots {
			b.forgetGrantees()
			if len(b.grants.clients) >= maxHoldSlots {
				return
			}
		}
		g = &grantee{}
		b.grants.clients[client] = g
	}
	g.unused = max(0, g.unused-admitted)
	if parked > 0 && admitted == 0 && now.Sub(g.grantedAt) > lostGrantAfter {
		g.unused = 0
	}
	switch {
	case parked == 0:
		g.since = time.Time{}
	case g.since.IsZero():
		g.since = now
	}
}

// forgetGrantees drops the clients that hold neither a parked call nor an
// unused grant: the memory stays bounded, and a client dropped and met
// again starts a new count, which its gate takes as one.
func (b *Bucket) forgetGrantees() {
	for id, g := range b.grants.clients {
		if g.unused == 0 && g.since.IsZero() {
			delete(b.grants.clients, id)
		}
	}
}

// grant gives the grants due by now at rate (first attempts a second for
// this replica's streams), each to the client parked longest whose parked
// calls are not all covered by its unused grants.
func (b *Bucket) grant(now time.Time, rate float64) {
	g := &b.grants
	if rate <= 0 {
		g.next = time.Time{}
		return
	}
	if g.next.IsZero() || now.Sub(g.next) > maxGrantDebt {
		g.next = now.Add(-maxGrantDebt)
	}
	every := time.Duration(float64(time.Second) / rate)
	for !g.next.After(now) {
		var to *grantee
		var toID string
		for id, n := range b.parkedBy {
			c := g.clients[id]
			if c == nil || int64(n) <= c.unused || c.since.IsZero() {
				continue
			}
			if to == nil || c.since.Before(to.since) || c.since.Equal(to.since) && id < toID {
				to, toID = c, id
			}
		}
		if to == nil {
			g.next = now // nobody waits: the room is not saved up
			return
		}
		to.total++
		to.unused++
		to.grantedAt = now
		g.next = g.next.Add(every)
	}
}

// grantsTo is client's running count of grants.
func (b *Bucket) grantsTo(client string) uint64 {
	if g := b.grants.clients[client]; g != nil {
		return g.total
	}
	return 0
}

// grantRate is the first attempts a second this replica grants for a pace
// that admits share f of the demand the gates make (pace in bucket.go): the
// pace's room, in proportion to the fleet's parked calls its own streams
// hold (the other replicas grant the rest to theirs).
func (b *Bucket) grantRate(now time.Time, c *Config, f float64) float64 {
	calls, parked := b.demand(now, c)
	room := f * (calls + parked)
	if all := b.fleetParked(now); all > 0 {
		return room * float64(b.parkedTotal()) / float64(all)
	}
	return room
}
