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

// splitByClass divides a common admit fraction f between the classes by
// the demand the streams reported: interactive first, batch the rest (at
// least BatchFloor of f). ok is false when nothing is to split: no pace,
// no batch demand, or nothing but batch.
func (b *Bucket) splitByClass(now time.Time, c *Config, f float64) (interactive, batch float64, ok bool) {
	if f >= 1 || b.batchFirst.secs == nil || b.firstAttempts.secs == nil {
		return f, f, false
	}
	demand := float64(b.firstAttempts.sum(now))
	bd := min(float64(b.batchFirst.sum(now)), demand)
	id := demand - bd
	if bd <= 0 || id <= 0 {
		return f, f, false
	}
	room := f * demand
	batch = min(1, max((room-id)/bd, BatchFloor*f))
	interactive = min(1, (room-batch*bd)/id)
	return interactive, batch, true
}
