package fleet

import (
	"fmt"
	"testing"
	"time"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

func TestHoldIsCappedByTheFleetAndTheCallersProfile(t *testing.T) {
	t.Parallel()
	week := 7 * 24 * time.Hour
	tests := []struct {
		name        string
		hint, ceil  time.Duration
		maxHint     time.Duration
		want        time.Duration
		wantAskedMs int64
	}{
		{name: "a week's hint holds for the fleet's ceiling", hint: week, maxHint: 5 * time.Minute, want: 5 * time.Minute},
		{name: "the caller's profile would wait less", hint: week, ceil: time.Minute, maxHint: 5 * time.Minute, want: time.Minute},
		{name: "a configured ceiling", hint: time.Hour, maxHint: 30 * time.Second, want: 30 * time.Second},
		{name: "a short hint stands", hint: 20 * time.Second, ceil: time.Minute, maxHint: 5 * time.Minute, want: 20 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, clk, rec := newTestFleet(t, func(c *Config) { c.Hold.MaxHint = tt.maxHint })
			a := ask("a", policydv1.FailureType_FAILURE_TYPE_OVERLOADED, time.Second)
			a.RetryAfter, a.HoldCeiling = tt.hint, tt.ceil
			a.Origin = Origin{Identity: "token:abc", Peer: "10.0.0.1:4242"}
			f.Decide(a)
			v, ok := f.Bucket("team", "availability:openai/gpt-4o")
			if !ok {
				t.Fatal("no bucket")
			}
			if v.State.HoldLeft != tt.want {
				t.Errorf("hold %v, want %v", v.State.HoldLeft, tt.want)
			}
			if len(rec.events) != 1 || rec.events[0].Kind != EventHoldSet || rec.events[0].Origin != a.Origin {
				t.Fatalf("events %+v, want one hold_set with the caller's origin", rec.events)
			}
			if got := rec.events[0].Counts["hold_ms"]; got != tt.want.Milliseconds() {
				t.Errorf("hold_ms %d, want %d", got, tt.want.Milliseconds())
			}
			clk.advance(tt.want)
			if v, _ := f.Bucket("team", "availability:openai/gpt-4o"); v.State.HoldLeft != 0 {
				t.Errorf("hold %v left after it should have expired", v.State.HoldLeft)
			}
		})
	}
}

func TestBucketCapIsPerTenant(t *testing.T) {
	t.Parallel()
	f, _, rec := newTestFleet(t, func(c *Config) { c.MaxBuckets = 10 })
	hostile := Target{Tenant: "hostile", Provider: "openai"}
	for i := range 50 {
		hostile.Model = fmt.Sprintf("m%d", i)
		f.Report(Usage{Target: hostile, ClientID: "x", Admitted: 1})
	}
	// The other tenant still gets its breaker.
	for i := range 20 {
		f.Decide(Ask{Target: Target{Tenant: "team", Provider: "openai", Model: "gpt-4o"}, ClientID: fmt.Sprint(i % 3),
			FailureType: policydv1.FailureType_FAILURE_TYPE_SERVER_ERROR, Retry: true, Delay: time.Second, Switches: AllOn})
	}
	if v, ok := f.Bucket("team", "availability:openai/gpt-4o"); !ok || v.State.Breaker != Open {
		t.Errorf("team's breaker: %+v, %v; want open", v.State, ok)
	}
	if got, _ := f.Buckets("hostile", "", "", 0, ""); len(got) != 10 {
		t.Errorf("hostile has %d buckets, want its cap of 10", len(got))
	}
	var limits []Event
	for _, e := range rec.events {
		if e.Kind == EventTenantLimit {
			limits = append(limits, e)
		}
	}
	if len(limits) != 1 || limits[0].Key.Tenant != "hostile" {
		t.Fatalf("tenant_limit events %+v, want one, for hostile", limits)
	}
}

func TestBucketLookupByName(t *testing.T) {
	t.Parallel()
	f, _, _ := newTestFleet(t, nil)
	targets := []Target{
		{Tenant: "team", Provider: "openrouter", Model: "meta-llama/llama-3@8b", KeyID: "k@1"},
		{Tenant: "team", Provider: "openai", Model: "gpt-4o", KeyID: "prod"},
		{Tenant: "other", Provider: "openai", Model: "gpt-4o", KeyID: "prod"},
	}
	for _, tg := range targets {
		f.Report(Usage{Target: tg, ClientID: "c", Admitted: 1})
	}
	for _, name := range []string{"availability:openrouter/meta-llama/llama-3@8b", "rate_limit:openrouter/meta-llama/llama-3@8b@k@1",
		"availability:openai/gpt-4o", "rate_limit:openai/gpt-4o@prod"} {
		if v, ok := f.Bucket("team", name); !ok || v.State.Bucket != name {
			t.Errorf("Bucket(%q) = %q, %v", name, v.State.Bucket, ok)
		}
	}
	if _, ok := f.Bucket("nobody", "availability:openai/gpt-4o"); ok {
		t.Error("a tenant saw another's bucket")
	}
}

func TestBucketsPages(t *testing.T) {
	t.Parallel()
	f, _, _ := newTestFleet(t, nil)
	for i := range 25 {
		f.Report(Usage{Target: Target{Tenant: "team", Provider: "openai", Model: fmt.Sprintf("m%02d", i)}, ClientID: "c", Admitted: 1})
	}
	var all []string
	after := ""
	for pages := 0; ; pages++ {
		page, next := f.Buckets("team", "", "", 7, after)
		for _, v := range page {
			all = append(all, v.State.Bucket)
		}
		if next == "" {
			break
		}
		if pages > 10 {
			t.Fatal("paging does not end")
		}
		after = next
	}
	if len(all) != 50 {
		t.Fatalf("%d buckets over the pages, want 50", len(all))
	}
	for i := 1; i < len(all); i++ {
		if all[i-1] >= all[i] {
			t.Fatalf("pages out of order at %d: %q then %q", i, all[i-1], all[i])
		}
	}
}

func TestCountsOverALongIntervalEnterTheWindowInProportion(t *testing.T) {
	t.Parallel()
	f, _, _ := newTestFleet(t, nil)
	// Ten minutes of a client's buffered successes are not ten minutes'
	// worth in the breaker's 10-s window: 60,000 become 1,000.
	f.Report(Usage{Target: Target{Tenant: "team", Provider: "openai", Model: "gpt-4o"}, ClientID: "x",
		Succeeded: 60_000, Admitted: 60_000, Elapsed: 10 * time.Minute})
	for i := range 60 {
		f.Decide(Ask{Target: Target{Tenant: "team", Provider: "openai", Model: "gpt-4o"}, ClientID: fmt.Sprint(i % 3),
			FailureType: policydv1.FailureType_FAILURE_TYPE_SERVER_ERROR, Switches: AllOn})
	}
	v, _ := f.Bucket("team", "availability:openai/gpt-4o")
	if v.Successes != 60_000 {
		t.Errorf("totals %d successes, want every one of 60,000", v.Successes)
	}
	f.store.lock()
	b := f.store.get(Key{Scope: ScopeAvailability, Tenant: "team", Provider: "openai", Model: "gpt-4o"}, false, f.clock())
	in := b.successes.sum(f.clock())
	f.store.unlock()
	if in != 1000 {
		t.Errorf("%d successes in the window, want 1000", in)
	}
}

func TestIdleOfABucketThatNeverFailed(t *testing.T) {
	t.Parallel()
	f, clk, _ := newTestFleet(t, nil)
	f.Report(Usage{Target: Target{Tenant: "team", Provider: "openai", Model: "gpt-4o"}, ClientID: "x", Admitted: 1})
	clk.advance(2 * time.Second)
	if v, _ := f.Bucket("team", "availability:openai/gpt-4o"); v.Idle != 2*time.Second {
		t.Errorf("idle %v, want 2s since its report", v.Idle)
	}
}

func TestSweepInChunksKeepsTheStoreWhole(t *testing.T) {
	t.Parallel()
	s := newBuckets(1 << 20)
	now := time.Now()
	for i := range 3*walkChunk + 7 {
		s.get(Key{Scope: ScopeAvailability, Tenant: fmt.Sprint(i % 3), Provider: "p", Model: fmt.Sprint(i)}, true, now)
	}
	s.sweep(func(b *Bucket) bool { return b.key.Model[len(b.key.Model)-1]%2 == 0 })
	n := 0
	for _, tb := range s.tenants {
		for k, b := range tb.m {
			n++
			if k.Model[len(k.Model)-1]%2 == 0 {
				t.Fatalf("%v survived the sweep", k)
			}
			if s.all[b.idx] != b {
				t.Fatalf("%v: idx %d does not point back at it", k, b.idx)
			}
		}
	}
	if n != len(s.all) || n == 0 {
		t.Fatalf("%d buckets in the maps, %d in the walk order", n, len(s.all))
	}
}
