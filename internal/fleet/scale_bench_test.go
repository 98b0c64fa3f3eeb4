package fleet

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

// scaleBuckets is the fleet size the operator goals are set at.
const scaleBuckets = 100_000

// fillFleet gives f n buckets as Coordinate streams make them: each report
// makes its target's availability and rate-limit buckets, with their rings,
// a streaming client, a learnt limit. Four tenants share them.
func fillFleet(f *Fleet, n int) {
	for i := range n / 2 {
		f.Report(Usage{Target: Target{Tenant: fmt.Sprintf("tenant-%d", i%4), Provider: "openai",
			Model: fmt.Sprintf("model-with-a-realistic-name-%06d", i), KeyID: "prod-key"},
			ClientID: fmt.Sprintf("client-%d", i%64), Admitted: 10, Succeeded: 9, Failed: 1, RequestsPerMinute: 10_000})
	}
}

// BenchmarkFleetMemory100k reports the heap that 100,000 buckets hold
// (goal: at most 200 MiB).
func BenchmarkFleetMemory100k(b *testing.B) {
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		f := New(Defaults())
		fillFleet(f, scaleBuckets)
		runtime.GC()
		runtime.ReadMemStats(&after)
		if got := f.Stats().Buckets; got != scaleBuckets {
			b.Fatalf("%d buckets, want %d", got, scaleBuckets)
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "MiB/100k-buckets")
		runtime.KeepAlive(f)
	}
}

// BenchmarkGetBucket100k looks buckets up by name in a fleet of 100,000
// while decisions run on other goroutines, and reports the lookups' p99
// (goal: at most 1 ms) and the decisions' p99 and worst (no decision
// stalled behind a lookup).
func BenchmarkGetBucket100k(b *testing.B) {
	f := New(Defaults())
	fillFleet(f, scaleBuckets)
	names := make([]string, 0, 1024)
	for i := range 1024 {
		names = append(names, fmt.Sprintf("availability:openai/model-with-a-realistic-name-%06d", i*4))
	}
	// The first decision's sweep of idle buckets (at most once a minute)
	// runs before the measurement: it is no lookup's doing.
	f.Decide(Ask{Target: Target{Tenant: "tenant-0", Provider: "openai"}, FailureType: policydv1.FailureType_FAILURE_TYPE_SERVER_ERROR, Switches: AllOn})
	runtime.GC()
	var stop atomic.Bool
	var mu sync.Mutex
	var decide []time.Duration
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Go(func() {
			var own []time.Duration
			for i := 0; !stop.Load(); i++ {
				a := Ask{Target: Target{Tenant: "tenant-0", Provider: "openai", Model: fmt.Sprintf("model-with-a-realistic-name-%06d", (i*8+g*4)%(scaleBuckets/2))},
					ClientID: "c", FailureType: policydv1.FailureType_FAILURE_TYPE_SERVER_ERROR, Retry: true, Delay: time.Second, Switches: AllOn}
				t0 := time.Now()
				f.Decide(a)
				own = append(own, time.Since(t0))
			}
			mu.Lock()
			decide = append(decide, own...)
			mu.Unlock()
		})
	}
	var get []time.Duration
	i := 0
	for b.Loop() {
		t0 := time.Now()
		if _, ok := f.Bucket("tenant-0", names[i%len(names)]); !ok {
			b.Fatalf("no bucket %s", names[i%len(names)])
		}
		get = append(get, time.Since(t0))
		i++
	}
	stop.Store(true)
	wg.Wait()
	b.ReportMetric(float64(quantile(get, 0.99).Microseconds()), "get-p99-µs")
	b.ReportMetric(float64(quantile(decide, 0.99).Microseconds()), "decide-p99-µs")
	b.ReportMetric(float64(quantile(decide, 1).Microseconds()), "decide-max-µs")
}

// BenchmarkListBucketsPage100k lists one page (the most, 1,000 buckets)
// of a tenant with 25,000 in a fleet of 100,000.
func BenchmarkListBucketsPage100k(b *testing.B) {
	f := New(Defaults())
	fillFleet(f, scaleBuckets)
	for b.Loop() {
		if page, _ := f.Buckets("tenant-0", "", "", MaxPageSize, ""); len(page) != MaxPageSize {
			b.Fatalf("%d buckets in the page", len(page))
		}
	}
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// BenchmarkWalks100k is the fleet's walks over 100,000 buckets (the
// once-a-minute sweep, and Tick's, every 250 ms) while decisions run, and
// reports the decisions' worst wait.
func BenchmarkWalks100k(b *testing.B) {
	f := New(Defaults())
	fillFleet(f, scaleBuckets)
	c := f.cfg.Load()
	f.Decide(Ask{Target: Target{Tenant: "tenant-0", Provider: "openai"}, FailureType: policydv1.FailureType_FAILURE_TYPE_SERVER_ERROR, Switches: AllOn})
	runtime.GC()
	var stop atomic.Bool
	var worst atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; !stop.Load(); i++ {
			t0 := time.Now()
			f.Decide(Ask{Target: Target{Tenant: "tenant-0", Provider: "openai", Model: fmt.Sprintf("model-with-a-realistic-name-%06d", (i*4)%(scaleBuckets/2))},
				ClientID: "c", FailureType: policydv1.FailureType_FAILURE_TYPE_SERVER_ERROR, Retry: true, Delay: time.Second, Switches: AllOn})
			if d := int64(time.Since(t0)); d > worst.Load() {
				worst.Store(d)
			}
		}
	})
	for b.Loop() {
		f.lastSweep.Store(0)
		f.maybeSweep(c, f.clock())
		f.lastTick.Store(0)
		f.Tick()
	}
	stop.Store(true)
	wg.Wait()
	b.ReportMetric(float64(time.Duration(worst.Load()).Microseconds()), "decide-max-µs")
}
