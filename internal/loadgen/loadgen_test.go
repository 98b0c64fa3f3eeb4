package loadgen

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestPercentileNearestRank(t *testing.T) {
	r := &Result{}
	for i := 100; i >= 1; i-- { // unsorted on purpose
		r.latencies = append(r.latencies, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{0.5, 50 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {1, 100 * time.Millisecond}, {0, time.Millisecond}} {
		if got := r.Percentile(tc.p); got != tc.want {
			t.Errorf("Percentile(%v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	if got := (&Result{}).Percentile(0.5); got != 0 {
		t.Errorf("Percentile of nothing = %v, want 0", got)
	}
}

func TestRunCountsCallsErrorsAndWorkers(t *testing.T) {
	var mu sync.Mutex
	workers := map[int]bool{}
	boom := errors.New("boom")
	r := Run(context.Background(), 4, 200*time.Millisecond, func(_ context.Context, w, seq int) error {
		mu.Lock()
		workers[w] = true
		mu.Unlock()
		time.Sleep(time.Millisecond)
		if seq%2 == 1 {
			return boom
		}
		return nil
	})
	if len(workers) != 4 {
		t.Errorf("calls came from %d workers, want 4", len(workers))
	}
	if r.Calls < 8 || r.Errors == 0 || r.Errors > r.Calls/2+4 || !errors.Is(r.FirstErr, boom) {
		t.Errorf("calls=%d errors=%d first=%v: want many calls, about half failed with boom", r.Calls, r.Errors, r.FirstErr)
	}
	if len(r.latencies) != r.Calls-r.Errors {
		t.Errorf("%d latencies for %d successful calls", len(r.latencies), r.Calls-r.Errors)
	}
	if r.RPS() <= 0 || r.Percentile(0.5) < time.Millisecond {
		t.Errorf("RPS %v, p50 %v: want > 0 and ≥ 1ms", r.RPS(), r.Percentile(0.5))
	}
	total := &Result{}
	total.Add(r)
	total.Add(r)
	if total.Calls != 2*r.Calls || total.Elapsed != 2*r.Elapsed || len(total.latencies) != 2*len(r.latencies) {
		t.Errorf("Add: %+v from twice %+v", total, r)
	}
}
