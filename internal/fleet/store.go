package fleet

import (
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// buckets is the fleet's memory: each tenant's buckets in a map of its own,
// behind one mutex. A decision holds it for a few hundred nanoseconds, far
// below a gRPC call's cost. Replicas each keep their own (decisions never
// wait on a database) and exchange verdicts in the background (Syncer).
//
// The cap on buckets is per tenant: a tenant that fills its share stops
// getting new buckets, and no other tenant notices.
type buckets struct {
	mu      sync.Mutex
	tenants map[string]*tenantBuckets
	max     int // per tenant
	// all is every bucket, in no order, for the walks that visit each one
	// (Tick, the sweep): a slice, unlike a map, can be walked a chunk at a
	// time with the lock released in between (Bucket.idx is the place).
	all []*Bucket

	limits []Event // tenant_limit events not yet published (takeLimits)
}

// tenantBuckets are one tenant's buckets.
type tenantBuckets struct {
	m map[Key]*Bucket
	// refused counts the buckets not created since the last tenant_limit
	// event; limitAt is that event's time.
	refused int64
	limitAt time.Time

	// reports: the tenant's report rate (Fleet.AdmitReports); its refusals
	// since the last tenant_limit event of that limit, and that event's time.
	reports        *rate.Limiter
	reportsRefused int64
	reportsLimitAt time.Time
}

// limitEvery is the least time between two tenant_limit events of one
// tenant and limit: the first refusal is journaled, the rest are counted
// in the next.
const limitEvery = time.Minute

func newBuckets(max int) *buckets {
	return &buckets{tenants: make(map[string]*tenantBuckets), max: max}
}

// lock takes the lock that every bucket's fields are read and written
// under; unlock gives it back.
func (s *buckets) lock()   { s.mu.Lock() }
func (s *buckets) unlock() { s.mu.Unlock() }

func (s *buckets) tenant(t string, create bool) *tenantBuckets {
	tb := s.tenants[t]
	if tb == nil && create {
		tb = &tenantBuckets{m: make(map[Key]*Bucket)}
		s.tenants[t] = tb
	}
	return tb
}

// get returns k's bucket (under lock): created when create and k's tenant
// has room (now is the time of a tenant_limit event when it has not), else
// nil when there is none.
func (s *buckets) get(k Key, create bool, now time.Time) *Bucket {
	tb := s.tenant(k.Tenant, create)
	if tb == nil {
		return nil
	}
	b := tb.m[k]
	if b != nil || !create {
		return b
	}
	if len(tb.m) >= s.max {
		s.refuse(tb, k, now)
		return nil
	}
	b = &Bucket{key: k, idx: len(s.all)}
	tb.m[k] = b
	s.all = append(s.all, b)
	return b
}

// refuse counts a bucket k's tenant has no room for, and queues a
// tenant_limit event when the last is older than limitEvery.
func (s *buckets) refuse(tb *tenantBuckets, k Key, now time.Time) {
	tb.refused++
	if !tb.limitAt.IsZero() && now.Sub(tb.limitAt) < limitEvery {
		return
	}
	s.limits = append(s.limits, Event{At: now, Key: k, Kind: EventTenantLimit,
		Reason: fmt.Sprintf("the tenant has %d buckets, its limit (fleet.max_buckets): new buckets are not tracked until idle ones are forgotten", len(tb.m)),
		Counts: map[string]int64{"max_buckets": int64(s.max), "refused": tb.refused}})
	tb.refused, tb.limitAt = 0, now
}

// takeLimits returns the queued tenant_limit events (under lock).
func (s *buckets) takeLimits() []Event {
	ev := s.limits
	s.limits = nil
	return ev
}

// getThree returns the bucket of each key (under lock), as get does with
// create[i]. (Arrays, not a slice: a decision allocates nothing to find its
// buckets.)
func (s *buckets) getThree(keys [3]Key, create [3]bool, now time.Time) [3]*Bucket {
	var bs [3]*Bucket
	for i, k := range keys {
		bs[i] = s.get(k, create[i], now)
	}
	return bs
}

// each runs fn on every bucket, a chunk at a time under the lock (walk):
// the syncer's rounds, metrics and stream statistics visit every bucket,
// and must not hold up decisions while they do.
func (s *buckets) each(fn func(*Bucket)) {
	s.walk(func(b *Bucket) bool {
		fn(b)
		return false
	})
}

// eachOf runs fn on tenant's buckets, under the lock the caller holds.
func (s *buckets) eachOf(tenant string, fn func(*Bucket)) {
	if tb := s.tenants[tenant]; tb != nil {
		for _, b := range tb.m {
			fn(b)
		}
	}
}

// walkChunk is how many buckets a chunked walk visits per hold of the lock:
// a few hundred microseconds, so that no decision waits behind a walk of
// a large fleet (one walk of 100,000 buckets held it for 60 ms).
const walkChunk = 1024

// walk runs fn on every bucket, a chunk at a time under the lock. fn may
// say a bucket is to be forgotten (returning true). A bucket created or
// forgotten during the walk may be missed or visited twice: the walks
// (Tick, the sweep) come again.
func (s *buckets) walk(fn func(*Bucket) (forget bool)) {
	for i := 0; ; {
		s.mu.Lock()
		if i >= len(s.all) {
			s.mu.Unlock()
			return
		}
		for end := min(i+walkChunk, len(s.all)); i < end; {
			b := s.all[i]
			if !fn(b) {
				i++
				continue
			}
			s.forget(b)
			end = min(end, len(s.all)) // the last bucket moved into i: visit it
		}
		s.mu.Unlock()
	}
}

// forget removes b (under lock), moving the last bucket into its place.
func (s *buckets) forget(b *Bucket) {
	tb := s.tenants[b.key.Tenant]
	delete(tb.m, b.key)
	last := s.all[len(s.all)-1]
	s.all[b.idx], last.idx = last, b.idx
	s.all[len(s.all)-1] = nil
	s.all = s.all[:len(s.all)-1]
	if len(tb.m) == 0 && tb.refused == 0 && tb.reportsRefused == 0 {
		delete(s.tenants, b.key.Tenant)
	}
}

// sweep forgets the buckets idle says can go, a chunk at a time.
func (s *buckets) sweep(idle func(*Bucket) bool) { s.walk(idle) }

func (s *buckets) setMax(max int) {
	s.mu.Lock()
	s.max = max
	s.mu.Unlock()
}
