package fleet

import "time"

// ring counts events per second over a window of whole seconds: enough
// resolution for breakers and release rates, and constant memory.
type ring struct {
	secs   []int64
	counts []int
}

func newRing(window time.Duration) ring {
	n := int(window / time.Second)
	if n < 1 {
		n = 1
	}
	return ring{secs: make([]int64, n), counts: make([]int, n)}
}

func (r *ring) add(now time.Time, n int) {
	s := now.Unix()
	i := int(uint64(s) % uint64(len(r.secs)))
	if r.secs[i] != s {
		r.secs[i], r.counts[i] = s, 0
	}
	r.counts[i] += n
}

// sum is the count in the window that ends now.
func (r *ring) sum(now time.Time) int {
	s, total := now.Unix(), 0
	for i, sec := range r.secs {
		if age := s - sec; age >= 0 && age < int64(len(r.secs)) {
			total += r.counts[i]
		}
	}
	return total
}

func (r *ring) reset() {
	for i := range r.secs {
		r.secs[i], r.counts[i] = 0, 0
	}
}
