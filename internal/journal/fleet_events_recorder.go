package journal

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// FleetEventRecorder journals fleet transitions in the background, so that
// the code that changes fleet state (under its own locks, on the request
// path) never waits for PostgreSQL. Record queues an event and returns at
// once; a goroutine writes the queue in batches with RecordFleetEvents.
// Events that find the queue full, or whose batch fails to write (the
// database is down), are dropped and counted: fleet state itself does not
// depend on the journal, only the post-mortem does.
//
// Close it before the Store it records into.
type FleetEventRecorder struct {
	s   *Store
	cfg fleetRecorderConfig

	mu     sync.RWMutex // guards closed against sends on queue
	closed bool
	queue  chan FleetEvent

	ctx     context.Context // cancelled when Close gives up waiting for the last flush
	cancel  context.CancelFunc
	done    chan struct{}
	closing sync.Once

	dropped, written atomic.Uint64
	failing          bool // the last flush failed; only the loop touches it
}

type fleetRecorderConfig struct {
	buffer       int
	batchSize    int
	interval     time.Duration
	closeTimeout time.Duration
}

// FleetRecorderOption configures a FleetEventRecorder.
type FleetRecorderOption func(*fleetRecorderConfig)

// WithFleetBuffer sets how many events may wait to be written; more are
// dropped. Default 4096: transitions are rare, so a full buffer means the
// database is far behind, not a burst. Values below 1 are ignored.
func WithFleetBuffer(n int) FleetRecorderOption {
	return func(c *fleetRecorderConfig) {
		if n >= 1 {
			c.buffer = n
		}
	}
}

// WithFleetBatch sets how many events the recorder writes at once at most
// (a full batch is written without waiting for the interval) and how often
// it writes what is queued. Defaults 200 and 250ms. Values below 1 are
// ignored; sizes are cut to MaxFleetEventsPerCall.
func WithFleetBatch(size int, interval time.Duration) FleetRecorderOption {
	return func(c *fleetRecorderConfig) {
		if size >= 1 {
			c.batchSize = min(size, MaxFleetEventsPerCall)
		}
		if interval > 0 {
			c.interval = interval
		}
	}
}

// WithFleetCloseTimeout bounds how long Close waits to write what is left.
// Default 5s. Values of zero or less are ignored.
func WithFleetCloseTimeout(d time.Duration) FleetRecorderOption {
	return func(c *fleetRecorderConfig) {
		if d > 0 {
			c.closeTimeout = d
		}
	}
}

// FleetEventRecorder starts a recorder that writes into s.
func (s *Store) FleetEventRecorder(opts ...FleetRecorderOption) *FleetEventRecorder {
	cfg := fleetRecorderConfig{buffer: 4096, batchSize: 200, interval: 250 * time.Millisecond, closeTimeout: 5 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	r := &FleetEventRecorder{s: s, cfg: cfg, queue: make(chan FleetEvent, cfg.buffer), done: make(chan struct{})}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	go r.loop()
	return r
}

// Record queues e and returns at once. An invalid event is dropped (and
// logged) here, so that it cannot fail the batch it would join. At
// defaults to now, the time of the transition rather than of the write.
func (r *FleetEventRecorder) Record(e FleetEvent) {
	ne, err := r.s.normalizeFleetEvent(e)
	if err != nil {
		r.dropped.Add(1)
		r.s.cfg.logger.Warn("journal: dropping an invalid fleet event", "bucket", clip(e.Bucket, 256), "error", err)
		return
	}
	e = ne
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		r.dropped.Add(1)
		return
	}
	select {
	case r.queue <- e:
	default:
		r.dropped.Add(1)
	}
}

// Dropped is how many events were not journaled: invalid, queue full,
// recorded after Close, or in a batch that failed to write.
func (r *FleetEventRecorder) Dropped() uint64 { return r.dropped.Load() }

// Written is how many events were committed.
func (r *FleetEventRecorder) Written() uint64 { return r.written.Load() }

// Close writes what is queued, waiting at most the close timeout (what is
// still unwritten then is dropped), and stops the recorder. Record calls
// after Close drop their event. Close is safe to call more than once.
func (r *FleetEventRecorder) Close() {
	r.closing.Do(func() {
		r.mu.Lock()
		r.closed = true
		close(r.queue)
		r.mu.Unlock()
		giveUp := time.AfterFunc(r.cfg.closeTimeout, r.cancel)
		<-r.done
		giveUp.Stop()
		r.cancel()
	})
}

// loop gathers events into batches and writes each when it is full or the
// interval has passed; when the queue is closed it writes the rest.
func (r *FleetEventRecorder) loop() {
	defer close(r.done)
	tick := time.NewTicker(r.cfg.interval)
	defer tick.Stop()
	batch := make([]FleetEvent, 0, r.cfg.batchSize)
	for {
		select {
		case e, ok := <-r.queue:
			if !ok {
				r.flush(batch)
				return
			}
			if batch = append(batch, e); len(batch) >= r.cfg.batchSize {
				r.flush(batch)
				batch = batch[:0]
			}
		case <-tick.C:
			if len(batch) > 0 {
				r.flush(batch)
				batch = batch[:0]
			}
		}
	}
}

// flush writes batch, or counts it dropped. A failure is logged once per
// outage, not once per batch.
func (r *FleetEventRecorder) flush(batch []FleetEvent) {
	if len(batch) == 0 {
		return
	}
	err := r.s.RecordFleetEvents(r.ctx, batch)
	if err != nil {
		r.dropped.Add(uint64(len(batch)))
		if !r.failing {
			r.s.cfg.logger.Warn("journal: fleet events dropped; dropping more until a write succeeds", "events", len(batch), "error", err)
		}
		r.failing = true
		return
	}
	r.written.Add(uint64(len(batch)))
	if r.failing {
		r.s.cfg.logger.Info("journal: writing fleet events again")
		r.failing = false
	}
}
