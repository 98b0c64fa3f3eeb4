package journal

import (
	"context"
	"time"
)

// Observer is told what the batching writers do, so that a caller can
// export it (internal/metrics turns it into Prometheus metrics) without the
// journal depending on a metrics library. Its methods run on the writers'
// goroutines, between a commit and the next batch: they must be cheap, safe
// for concurrent use, and must not block.
type Observer interface {
	// BatchCommitted is called after each transaction a writer ran: size
	// is the number of Record calls it answered, took how long the
	// transaction took (retries after a lost deadlock included), and err
	// is nil when it committed, else why it did not.
	BatchCommitted(size int, took time.Duration, err error)
}

// WithObserver makes o observe the store's batching writers. Default none.
// A nil o is ignored.
func WithObserver(o Observer) Option {
	return func(c *config) {
		if o != nil {
			c.observer = o
		}
	}
}

// nopObserver is the Observer of a store opened without WithObserver.
type nopObserver struct{}

func (nopObserver) BatchCommitted(int, time.Duration, error) {}

// QueueDepth returns how many Record calls wait in the writers' queues for
// a batch, summed over the writers. It costs a few channel length reads, so
// a metrics scrape can call it freely; a depth that stays near the queues'
// capacity means the database cannot keep up.
func (s *Store) QueueDepth() int {
	n := 0
	for _, q := range s.queues {
		n += len(q)
	}
	return n
}

// WatchReady calls fn with whether the store is ready (Ready returns nil),
// once at the start and then after each change, until ctx ends or the store
// is closed; after Close it reports false (unless it just did) and returns. It does
// not poll: the store wakes it when it marks the database down or back (see
// Healthy), so a readiness probe follows an outage as soon as the store
// notices it. Run it on its own goroutine.
func (s *Store) WatchReady(ctx context.Context, fn func(ready bool)) {
	last, first := false, true
	for {
		s.readyMu.Lock()
		changed := s.readyChanged
		s.readyMu.Unlock()
		// Read the state after taking the channel: a change in between
		// closes the channel, and the loop reads the state again. Whether
		// the store is closed is read first: a Close after it closes the
		// channel and the loop reports it on its next turn (read after
		// Ready, a Close in between would end the loop unreported).
		closed := s.isClosed()
		ready := s.Ready(context.Background()) == nil
		if first || ready != last {
			fn(ready)
			first, last = false, ready
		}
		if closed {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

// readyChange wakes the WatchReady loops: Healthy or Close changed what
// Ready answers.
func (s *Store) readyChange() {
	s.readyMu.Lock()
	close(s.readyChanged)
	s.readyChanged = make(chan struct{})
	s.readyMu.Unlock()
}

func (s *Store) isClosed() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.closed
}
