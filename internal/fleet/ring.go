package fleet

import (
	"math"
	"time"
)

// ring counts events per second over a window of whole seconds: enough
// resolution for breakers and release rates, and constant memory.
//
// A second is 8 bytes (a second as uint32 Unix time, good until 2106, and its
// count): a bucket keeps six rings, and a fleet of 100,000 buckets keeps
// them in memory.
type ring struct {
	secs []second
}

type second struct {
	sec uint32
	n   int32
}

// newRings returns k rings over window that share one allocation.
func newRings(window time.Duration, k int) []ring {
	n := max(int(window/time.Second), 1)
	all := make([]second, n*k)
	rs := make([]ring, k)
	for i := range rs {
		rs[i] = ring{secs: all[i*n : (i+1)*n : (i+1)*n]}
	}
	return rs
}

func (r *ring) add(now time.Time, n int) {
	s := uint32(now.Unix())
	sl := &r.secs[int(s%uint32(len(r.secs)))]
	if sl.sec != s {
		sl.sec, sl.n = s, 0
	}
	// Counts are bounded far below this by the reports' limits; saturate
	// rather than wrap all the same.
	sl.n = int32(min(int64(sl.n)+int64(n), math.MaxInt32))
}

// sum is the count in the window that ends now.
func (r *ring) sum(now time.Time) int {
	s, total := int64(uint32(now.Unix())), 0
	for _, sl := range r.secs {
		if age := s - int64(sl.sec); age >= 0 && age < int64(len(r.secs)) {
			total += int(sl.n)
		}
	}
	return total
}

// sumLast is the count of the last k seconds, the current one included.
func (r *ring) sumLast(now time.Time, k int) int {
	s, total := int64(uint32(now.Unix())), 0
	k = min(k, len(r.secs))
	for _, sl := range r.secs {
		if age := s - int64(sl.sec); age >= 0 && age < int64(k) {
			total += int(sl.n)
		}
	}
	return total
}

func (r *ring) reset() {
	clear(r.secs)
}
