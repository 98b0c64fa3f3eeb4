package fleet

import "sync"

// buckets is the fleet's memory: its buckets in a map behind one mutex. A
// decision holds it for a few hundred nanoseconds, far below a gRPC call's
// cost. Replicas each keep their own (decisions never wait on a database)
// and exchange verdicts in the background (Syncer).
type buckets struct {
	mu  sync.Mutex
	m   map[Key]*Bucket
	max int
}

func newBuckets(max int) *buckets {
	return &buckets{m: make(map[Key]*Bucket), max: max}
}

// lock takes the lock that every bucket's fields are read and written
// under; unlock gives it back.
func (s *buckets) lock()   { s.mu.Lock() }
func (s *buckets) unlock() { s.mu.Unlock() }

// get returns k's bucket (under lock): created when create and the fleet
// is not full, else nil when there is none.
func (s *buckets) get(k Key, create bool) *Bucket {
	b := s.m[k]
	if b == nil && create && len(s.m) < s.max {
		b = &Bucket{key: k}
		s.m[k] = b
	}
	return b
}

// getThree returns the bucket of each key (under lock), as get does with
// create[i]. (Arrays, not a slice: a decision allocates nothing to find its
// buckets.)
func (s *buckets) getThree(keys [3]Key, create [3]bool) [3]*Bucket {
	var bs [3]*Bucket
	for i, k := range keys {
		bs[i] = s.get(k, create[i])
	}
	return bs
}

// each runs fn on every bucket, taking the lock.
func (s *buckets) each(fn func(*Bucket)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.m {
		fn(b)
	}
}

// sweep forgets the buckets idle says can go, taking the lock.
func (s *buckets) sweep(idle func(*Bucket) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, b := range s.m {
		if idle(b) {
			delete(s.m, k)
		}
	}
}

func (s *buckets) setMax(max int) {
	s.mu.Lock()
	s.max = max
	s.mu.Unlock()
}
