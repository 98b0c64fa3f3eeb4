// Package loadgen drives a function from many goroutines for a fixed time
// and measures throughput and latency: the load generator of `make bench`.
//
// It is ours rather than ghz because the benchmark needs to alternate
// several targets within one process run and compare them, with
// per-call payloads (fresh context ids and attempt numbers) that a generic
// tool cannot generate.
package loadgen

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Call is one unit of load: worker is the goroutine's index, seq the call's
// index within that worker. A non-nil error counts as a failed call.
type Call func(ctx context.Context, worker, seq int) error

// Result is what one or more runs measured.
type Result struct {
	Calls     int
	Errors    int
	FirstErr  error
	Elapsed   time.Duration
	latencies []time.Duration // of successful calls, unsorted until Percentile
	sorted    bool
}

// Run calls call from concurrency goroutines until d has passed (or ctx is
// done) and returns what it measured. Each goroutine runs its calls one
// after another, so concurrency is also the number of calls in flight.
// Calls get ctx itself, not a deadline of d: the calls in flight when d
// ends finish normally and count, rather than failing with a deadline that
// is the benchmark's, not the server's.
func Run(ctx context.Context, concurrency int, d time.Duration, call Call) *Result {
	var stop atomic.Bool
	timer := time.AfterFunc(d, func() { stop.Store(true) })
	defer timer.Stop()
	type workerResult struct {
		calls, errors int
		firstErr      error
		latencies     []time.Duration
	}
	results := make([]workerResult, concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range concurrency {
		wg.Go(func() {
			r := &results[w]
			r.latencies = make([]time.Duration, 0, 4096)
			for seq := 0; !stop.Load() && ctx.Err() == nil; seq++ {
				t0 := time.Now()
				err := call(ctx, w, seq)
				lat := time.Since(t0)
				if ctx.Err() != nil {
					return // the caller gave up: neither counted nor timed
				}
				r.calls++
				if err != nil {
					r.errors++
					if r.firstErr == nil {
						r.firstErr = err
					}
					continue
				}
				r.latencies = append(r.latencies, lat)
			}
		})
	}
	wg.Wait()
	res := &Result{Elapsed: time.Since(start)}
	for _, r := range results {
		res.Calls += r.calls
		res.Errors += r.errors
		if res.FirstErr == nil {
			res.FirstErr = r.firstErr
		}
		res.latencies = append(res.latencies, r.latencies...)
	}
	return res
}

// Add merges o into r: the calls, errors and latencies of both, over the
// sum of their elapsed times.
func (r *Result) Add(o *Result) {
	r.Calls += o.Calls
	r.Errors += o.Errors
	if r.FirstErr == nil {
		r.FirstErr = o.FirstErr
	}
	r.Elapsed += o.Elapsed
	r.latencies = append(r.latencies, o.latencies...)
	r.sorted = false
}

// RPS is the successful calls per second.
func (r *Result) RPS() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Calls-r.Errors) / r.Elapsed.Seconds()
}

// Percentile returns the latency below which a fraction p (0..1) of the
// successful calls fell (nearest rank), or 0 with no successful call.
func (r *Result) Percentile(p float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	if !r.sorted {
		slices.Sort(r.latencies)
		r.sorted = true
	}
	i := int(p*float64(len(r.latencies))+0.5) - 1
	i = max(0, min(i, len(r.latencies)-1))
	return r.latencies[i]
}
