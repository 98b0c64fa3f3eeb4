package fleet

import "time"

// Priority classes: a call is interactive (a person waits on it; the
// default) or batch (a job that can wait). When a bucket is paced or
// slow-starting, the room the pace leaves goes to interactive first
// attempts first, and batch takes what they leave: a batch job on the same
// key never starves an agent a person is waiting on. Batch keeps at least
// BatchFloor of the share everyone would get, so that it is never shut out
// while interactive demand lasts.

// BatchFloor is the least share of the common admit fraction the batch
// class keeps.
const BatchFloor = 0.1

// addBatch counts the batch class's first attempts a report carried.
func (b *Bucket) addBatch(now time.Time, c *BreakerConfig, n int64) {
	if n <= 0 {
		return
	}
	if b.batchFirst.secs == nil {
		b.batchFirst = newRings(c.Window, 1)[0]
	}
	b.batchFirst.add(now, int(n))
}

// splitByClass divides a common admit fraction f between the classes:
// the room f leaves of the draws the gates make (demand: new calls and
// parked calls drawing again) goes to the interactive calls arriving
// first, and batch (its new calls, and the parked calls, which are batch
// while interactive calls are all admitted) takes the rest, at least
// BatchFloor of f. ok is false when nothing is to split: no pace, no batch
// demand, or nothing but batch.
func (b *Bucket) splitByClass(now time.Time, c *Config, f float64) (interactive, batch float64, ok bool) {
	if f >= 1 || b.batchFirst.secs == nil || b.firstAttempts.secs == nil {
		return f, f, false
	}
	calls, parked := b.demand(now, c)
	share := float64(b.batchFirst.sum(now)) / max(float64(b.firstAttempts.sum(now)), 1)
	id := calls * (1 - min(share, 1)) // interactive calls arriving a second
	rest := calls + parked - id       // batch's draws
	if share <= 0 || id <= 0 || rest <= 0 {
		return f, f, false
	}
	room := f * (calls + parked)
	batch = min(1, max((room-id)/rest, BatchFloor*f))
	interactive = min(1, (room-batch*rest)/id)
	return interactive, batch, true
}
