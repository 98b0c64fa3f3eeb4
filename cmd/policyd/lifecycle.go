package main

import (
	"context"
	"slices"
	"sync"
)

// lifecycle is how the daemon starts and stops its background parts, one
// way for all: what run opens registers its Close (onStop), what runs
// until told to stop is started with run on a context of its own, and stop
// ends them all in the reverse order of their start, waiting for each loop
// to return before the part started before it stops (the syncer before
// the exchange it writes to, the event recorder before the journal).
type lifecycle struct {
	mu      sync.Mutex
	stops   []func()
	stopped bool
}

func newLifecycle() *lifecycle { return &lifecycle{} }

// onStop registers fn to be called at stop.
func (l *lifecycle) onStop(fn func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stops = append(l.stops, fn)
}

// run starts fn on its own goroutine with a context that stop cancels; stop
// waits for fn to return. The context does not end with the daemon's own
// (a signal): the parts keep running while the gRPC server drains, and stop
// when stop says.
func (l *lifecycle) run(fn func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(ctx)
	}()
	l.onStop(func() {
		cancel()
		<-done
	})
}

// stop stops everything registered, newest first, once.
func (l *lifecycle) stop() {
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return
	}
	l.stopped = true
	stops := slices.Clone(l.stops)
	l.mu.Unlock()
	for _, fn := range slices.Backward(stops) {
		fn()
	}
}
