package fleet

import "sync"

// Store holds the buckets. MemoryStore is the one-replica store; a store
// shared by replicas keeps the same memory (decisions never wait on a
// database) and exchanges verdicts in the background.
type Store interface {
	// Acquire takes the store's lock and returns the bucket of each key:
	// created when create[i], else nil when the store has none (or is full).
	// Release gives the lock back. (Arrays, not a callback: a decision
	// allocates nothing to find its buckets.)
	Acquire(keys [3]Key, create [3]bool) [3]*Bucket
	Release()
	// Each runs fn on every bucket under the lock.
	Each(fn func(*Bucket))
	// Sweep forgets the buckets idle says can go.
	Sweep(idle func(*Bucket) bool)
}

// MemoryStore keeps buckets in a map behind one mutex: a decision holds it
// for a few hundred nanoseconds, far below a gRPC call's cost.
type MemoryStore struct {
	mu      sync.Mutex
	buckets map[Key]*Bucket
	max     int
}

// NewMemoryStore returns a store of at most max buckets.
func NewMemoryStore(max int) *MemoryStore {
	return &MemoryStore{buckets: make(map[Key]*Bucket), max: max}
}

// Acquire implements Store.
func (m *MemoryStore) Acquire(keys [3]Key, create [3]bool) [3]*Bucket {
	var bs [3]*Bucket
	m.mu.Lock()
	for i, k := range keys {
		b := m.buckets[k]
		if b == nil && create[i] && len(m.buckets) < m.max {
			b = &Bucket{key: k}
			m.buckets[k] = b
		}
		bs[i] = b
	}
	return bs
}

// Release implements Store.
func (m *MemoryStore) Release() { m.mu.Unlock() }

// Each implements Store.
func (m *MemoryStore) Each(fn func(*Bucket)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, b := range m.buckets {
		fn(b)
	}
}

// Sweep implements Store.
func (m *MemoryStore) Sweep(idle func(*Bucket) bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, b := range m.buckets {
		if idle(b) {
			delete(m.buckets, k)
		}
	}
}

func (m *MemoryStore) setMax(max int) {
	m.mu.Lock()
	m.max = max
	m.mu.Unlock()
}

// Len is the number of buckets.
func (m *MemoryStore) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.buckets)
}
