package fleet

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// Leases of a cap on requests in flight. A target whose server throttles
// concurrency (Config.MaxInFlight) has its cap divided among the clients
// that stream on it, in proportion to what each wants now: its requests in
// flight and its parked calls, as its reports say. Each client's gate
// holds at most its lease in flight, and parks the rest. With several
// replicas each
// leases the cap's share of the replicas active on the bucket (the streams
// spread evenly over them).

// maxInFlightCap bounds a configured cap.
const maxInFlightCap = 1_000_000

// leaseEvery is how often a bucket's leases are apportioned again: every
// stream asks for its assignment four times a second.
const leaseEvery = 250 * time.Millisecond

// inFlightCap is the cap on t's requests in flight (0: none).
func (c *Config) inFlightCap(t Target) int {
	if len(c.MaxInFlight) == 0 {
		return 0
	}
	p := strings.ToLower(t.Provider)
	if n, ok := c.MaxInFlight[p+"/"+strings.ToLower(t.Model)]; ok {
		return n
	}
	return c.MaxInFlight[p]
}

// reportInFlight records client's requests in flight.
func (b *Bucket) reportInFlight(client string, n int64) {
	if n == 0 && b.inFlightBy == nil {
		return
	}
	if b.inFlightBy == nil {
		b.inFlightBy = make(map[string]int64)
	}
	if n == 0 {
		delete(b.inFlightBy, client)
		return
	}
	if _, ok := b.inFlightBy[client]; ok || len(b.inFlightBy) < maxHoldSlots {
		b.inFlightBy[client] = n
	}
}

// lease is client's lease of b's cap of limit requests in flight.
func (f *Fleet) lease(b *Bucket, c *Config, client string, limit int, now time.Time) uint32 {
	n, ok := b.leases[client]
	if !ok || now.Sub(b.leasedAt) >= leaseEvery || b.leaseCap != limit {
		f.apportion(b, c, limit, now)
		n = b.leases[client]
	}
	return n
}

// apportion divides this replica's part of the cap among the clients
// streaming on b, each by its requests in flight and parked calls plus
// one (a client that wants nothing now keeps room for its next call): the
// whole part is leased, by largest remainder, so that the leases add up to
// it exactly. With more clients than the part, some hold none at a time.
func (f *Fleet) apportion(b *Bucket, c *Config, limit int, now time.Time) {
	share := limit
	if len(b.remote) > 0 {
		share = max(limit/(b.others(now).replicas+1), 1)
	}
	clients := make([]string, 0, len(b.streamClients))
	for id, at := range b.streamClients {
		if now.Sub(time.Unix(0, at)) < c.Breaker.Window { // streaming now
			clients = append(clients, id)
		}
	}
	// A stable order: the remainders' ties go the same way every time.
	slices.Sort(clients)
	weights := make([]float64, len(clients))
	total := 0.0
	for i, id := range clients {
		weights[i] = float64(b.inFlightBy[id] + b.parkedBy[id] + 1)
		total += weights[i]
	}
	leases := make(map[string]uint32, len(clients))
	rems := make([]float64, len(clients))
	given := 0
	for i, id := range clients {
		exact := float64(share) * weights[i] / total
		leases[id] = uint32(exact)
		rems[i] = exact - float64(leases[id])
		given += int(leases[id])
	}
	order := make([]int, len(clients))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int { return cmp.Compare(rems[j], rems[i]) })
	for _, i := range order[:min(share-given, len(order))] {
		leases[clients[i]]++
	}
	b.leases, b.leasedAt, b.leaseCap = leases, now, limit
}
