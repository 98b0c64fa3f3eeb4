package fleet

import (
	"sort"
	"strings"
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
	// Idle is the time since the bucket's last failure or report (0 when
	// it had neither here: another replica's verdict made it).
	Idle time.Duration

	// Coordinate streams: clients reporting in the window, totals since
	// the daemon started, the share of first attempts admitted now and the
	// provider's reported request limit.
	StreamingClients                                int
	Reports, Assignments, Admitted, Shed, Successes int64
	AdmitFraction                                   float64
	RequestsPerMinute, InputTokensPerMinute         int64
	// Limits are the provider's limits the bucket knows of.
	Limits []LimitView
}

func (f *Fleet) view(c *Config, b *Bucket, now time.Time) BucketView {
	v := BucketView{Key: b.key, State: *f.state(c, b, now, false), Changed: b.changed, FirstClient: b.firstClient}
	if last := latest(b.lastFailure, b.reportedAt, b.streamedElsewhere); !last.IsZero() {
		v.Idle = now.Sub(last)
	}
	if b.window.secs != nil {
		v.WindowFailures = b.window.sum(now)
		v.WindowClients = b.windowClients(now, c.Breaker.Window)
	}
	v.StreamingClients = b.streamingClients(now, c)
	t := b.totals
	v.Reports, v.Assignments, v.Admitted, v.Shed, v.Successes = t.reports, t.assignments, t.admitted, t.shed, t.successes
	v.AdmitFraction, _, _ = b.admitFraction(now, c)
	v.RequestsPerMinute = b.limits[requestLimit].perMinute
	v.InputTokensPerMinute = b.limits[tokenLimit].perMinute
	v.Limits = b.limitViews(now)
	v.OpenPeriod = c.Breaker.OpenFor
	if b.state != Closed {
		v.OpenPeriod = b.reopenPeriod(now, &c.Breaker)
	}
	if now.Sub(b.lastFailure) >= incidentGap {
		v.FirstClient = "" // that incident is over
	}
	return v
}

// latest is the latest of ts.
func latest(ts ...time.Time) time.Time {
	var l time.Time
	for _, t := range ts {
		if t.After(l) {
			l = t
		}
	}
	return l
}

// MaxPageSize is the most buckets one Buckets page holds (and its default):
// a page is one answer, and a large one holds the lock while it renders.
const MaxPageSize = 1000

// Buckets lists a page of tenant's buckets, sorted by name, with those
// filters that are not empty: at most size (MaxPageSize when 0 or more)
// whose names sort after after (the previous page's last). next is the
// last name of a full page when more may follow, else "".
//
// Only tenant's buckets are read, and the lock is held twice briefly: to
// copy their keys, then to render the page.
func (f *Fleet) Buckets(tenant, provider, model string, size int, after string) (page []BucketView, next string) {
	if size <= 0 || size > MaxPageSize {
		size = MaxPageSize
	}
	var keys []Key
	f.store.lock()
	f.store.eachOf(tenant, func(b *Bucket) {
		k := b.key
		if (provider == "" || k.Provider == provider) && (model == "" || k.Model == model) {
			keys = append(keys, k)
		}
	})
	f.store.unlock()
	type named struct {
		name string
		key  Key
	}
	list := make([]named, 0, len(keys))
	for _, k := range keys {
		if n := k.String(); n > after {
			list = append(list, named{n, k})
		}
	}
	sort.Slice(list, func(i, j int) bool { return list[i].name < list[j].name })
	more := len(list) > size
	if more {
		list = list[:size]
	}
	now, c := f.clock(), f.cfg.Load()
	f.store.lock()
	for _, n := range list {
		if b := f.store.get(n.key, false, now); b != nil { // unless forgotten meanwhile
			page = append(page, f.view(c, b, now))
		}
	}
	f.store.unlock()
	if more {
		next = list[len(list)-1].name
	}
	return page, next
}

// Bucket returns tenant's bucket named name (Key.String), if the fleet has
// it: a lookup by key, never a scan (keysNamed).
func (f *Fleet) Bucket(tenant, name string) (BucketView, bool) {
	now, c := f.clock(), f.cfg.Load()
	f.store.lock()
	defer f.store.unlock()
	for _, k := range keysNamed(tenant, name) {
		if b := f.store.get(k, false, now); b != nil {
			return f.view(c, b, now), true
		}
	}
	return BucketView{}, false
}

// maxNameSeparators bounds the '/' and '@' keysNamed tries as the places
// where a name's parts meet: real names have a few.
const maxNameSeparators = 8

// keysNamed are the keys whose name (Key.String) is name: a provider, a
// model and a key id may themselves hold '/' or '@', so each split at a
// separator that gives back name is a candidate.
func keysNamed(tenant, name string) []Key {
	scopeName, rest, ok := strings.Cut(name, ":")
	if !ok {
		return nil
	}
	s, err := ParseScope(scopeName)
	if err != nil {
		return nil
	}
	var out []Key
	for _, kcut := range cuts(rest, '@') {
		head, keyID := rest[:kcut], ""
		if kcut < len(rest) {
			keyID = rest[kcut+1:]
		}
		for _, mcut := range cuts(head, '/') {
			k := Key{Scope: s, Tenant: tenant, Provider: head[:mcut], KeyID: keyID}
			if mcut < len(head) {
				k.Model = head[mcut+1:]
			}
			if k.String() == name {
				out = append(out, k)
			}
		}
	}
	return out
}

// cuts are the positions of sep in s (up to maxNameSeparators), and len(s)
// for no cut.
func cuts(s string, sep byte) []int {
	out := []int{len(s)}
	for i := 0; i < len(s) && len(out) <= maxNameSeparators; i++ {
		if s[i] == sep {
			out = append(out, i)
		}
	}
	return out
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
