package fleet

import (
	"sort"
	"time"
)

// BucketView is a bucket as FleetService shows it.
type BucketView struct {
	Key            Key
	State          State
	WindowFailures int
	WindowClients  int
	OpenPeriod     time.Duration // the next open period
	Changed        int64
	FirstClient    string
	Idle           time.Duration

	// Coordinate streams: clients reporting in the window, totals since
	// the daemon started, the share of first attempts admitted now and the
	// provider's reported request limit.
	StreamingClients                                int
	Reports, Assignments, Admitted, Shed, Successes int64
	AdmitFraction                                   float64
	RequestsPerMinute                               int64
}

func (f *Fleet) view(c *Config, b *Bucket, now time.Time) BucketView {
	v := BucketView{Key: b.key, State: *f.state(c, b, now, false), Changed: b.changed, FirstClient: b.firstClient, Idle: now.Sub(b.lastFailure)}
	if b.window.secs != nil {
		v.WindowFailures = b.window.sum(now)
		v.WindowClients = b.windowClients(now, c.Breaker.Window)
	}
	v.StreamingClients = b.streamingClients(now, c)
	t := b.totals
	v.Reports, v.Assignments, v.Admitted, v.Shed, v.Successes = t.reports, t.assignments, t.admitted, t.shed, t.successes
	v.AdmitFraction, _ = b.admitFraction(now, c)
	v.RequestsPerMinute = b.rpm
	v.OpenPeriod = c.Breaker.OpenFor
	if b.state != Closed {
		v.OpenPeriod = b.reopenPeriod(now, &c.Breaker)
	}
	if now.Sub(b.lastFailure) >= incidentGap {
		v.FirstClient = "" // that incident is over
	}
	return v
}

// Buckets lists tenant's buckets, sorted by name, with those filters that
// are not empty.
func (f *Fleet) Buckets(tenant, provider, model string) []BucketView {
	now, c := f.clock(), f.cfg.Load()
	var out []BucketView
	f.store.each(func(b *Bucket) {
		k := b.key
		if k.Tenant != tenant || (provider != "" && k.Provider != provider) || (model != "" && k.Model != model) {
			return
		}
		out = append(out, f.view(c, b, now))
	})
	sort.Slice(out, func(i, j int) bool { return out[i].State.Bucket < out[j].State.Bucket })
	return out
}

// Bucket returns tenant's bucket named name (Key.String), if the fleet has it.
func (f *Fleet) Bucket(tenant, name string) (BucketView, bool) {
	now, c := f.clock(), f.cfg.Load()
	var v BucketView
	found := false
	f.store.each(func(b *Bucket) {
		if !found && b.key.Tenant == tenant && b.key.String() == name {
			v, found = f.view(c, b, now), true
		}
	})
	return v, found
}

// Stats are the fleet's totals, for metrics.
type Stats struct {
	Buckets         int
	Breakers        map[BreakerState]int
	Holds, Stops    int
	BudgetExhausted int
	// MinTokens is the lowest retry budget among buckets that have one
	// (Burst when none has).
	MinTokens float64
}

// Stats counts the fleet's state now.
func (f *Fleet) Stats() Stats {
	now, c := f.clock(), f.cfg.Load()
	s := Stats{Breakers: map[BreakerState]int{Closed: 0, Open: 0, HalfOpen: 0}, MinTokens: c.Budget.Burst}
	f.store.each(func(b *Bucket) {
		s.Buckets++
		st := b.state
		if st == Open && !now.Before(b.openUntil) {
			st = HalfOpen // advanced lazily by the next decision
		}
		if b.key.Scope == ScopeAvailability {
			s.Breakers[st]++
		}
		if now.Before(b.holdUntil) {
			s.Holds++
		}
		if now.Before(b.stopUntil) {
			s.Stops++
		}
		if b.exhausted {
			s.BudgetExhausted++
		}
		if !b.tokensAt.IsZero() {
			t := min(b.burst(now, c), b.tokens+b.refillRate(now, c)*now.Sub(b.tokensAt).Seconds())
			s.MinTokens = min(s.MinTokens, t)
		}
	})
	return s
}
