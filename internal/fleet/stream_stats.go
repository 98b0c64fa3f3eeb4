package fleet

import (
	"time"
)

// StreamOpened and StreamClosed count the Coordinate streams connected.
func (f *Fleet) StreamOpened() { f.streams.Add(1) }

func (f *Fleet) StreamClosed() { f.streams.Add(-1) }

// StreamTotals are one provider and model's stream counts (its
// availability buckets, all tenants), for metrics.
type StreamTotals struct {
	Provider, Model                                 string
	Reports, Assignments, Admitted, Shed, Successes int64
	Clients                                         int
	AdmitFraction                                   float64
}

// StreamStats returns the streams connected and, per provider and model
// with reports, the totals.
func (f *Fleet) StreamStats() (streams int64, perModel []StreamTotals) {
	now, c := f.clock(), f.cfg.Load()
	idx := map[[2]string]int{}
	f.store.each(func(b *Bucket) {
		if b.key.Scope != ScopeAvailability || b.totals.reports == 0 {
			return
		}
		k := [2]string{b.key.Provider, b.key.Model}
		i, ok := idx[k]
		if !ok {
			i = len(perModel)
			idx[k] = i
			perModel = append(perModel, StreamTotals{Provider: k[0], Model: k[1], AdmitFraction: 1})
		}
		t := &perModel[i]
		t.Reports += b.totals.reports
		t.Assignments += b.totals.assignments
		t.Admitted += b.totals.admitted
		t.Shed += b.totals.shed
		t.Successes += b.totals.successes
		t.Clients += b.streamingClients(now, c)
		fr, _, _ := b.admitFraction(now, c)
		t.AdmitFraction = min(t.AdmitFraction, fr)
	})
	return f.streams.Load(), perModel
}

// streamingClients counts the clients that reported on b within the
// breaker's window.
func (b *Bucket) streamingClients(now time.Time, c *Config) int {
	n := 0
	for id, ns := range b.streamClients {
		at := time.Unix(0, ns)
		if now.Sub(at) < c.Breaker.Window {
			n++
		} else if now.Sub(at) > c.Stream.AbandonAfter {
			delete(b.streamClients, id)
		}
	}
	return n
}
