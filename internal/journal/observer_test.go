package journal_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/policyd/policyd/internal/journal"
)

// batchLog is an Observer that keeps what it is told.
type batchLog struct {
	mu      sync.Mutex
	sizes   []int
	failed  int
	maxTook time.Duration
}

func (b *batchLog) BatchCommitted(size int, took time.Duration, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		b.failed++
		return
	}
	b.sizes = append(b.sizes, size)
	b.maxTook = max(b.maxTook, took)
}

func (b *batchLog) committed() (batches, records int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, n := range b.sizes {
		records += n
	}
	return len(b.sizes), records
}

// TestObserverSeesEveryCommittedRecord: every Record call that committed
// is in exactly one observed batch, and the queues are empty afterwards.
func TestObserverSeesEveryCommittedRecord(t *testing.T) {
	t.Parallel()
	obs := &batchLog{}
	s := openStore(t, journal.WithObserver(obs), journal.WithBatchWindow(5*time.Millisecond))
	c := begin(t, s, journal.Context{Tenant: "acme"})
	const n = 20
	var wg sync.WaitGroup
	for i := 1; i <= n; i++ {
		wg.Go(func() { record(t, s, "acme", journal.Attempt{ContextID: c.ID, Attempt: i}) })
	}
	wg.Wait()
	batches, records := obs.committed()
	if records != n || batches < 1 || batches > n {
		t.Errorf("observed %d records in %d batches, want %d records in 1..%d batches", records, batches, n, n)
	}
	if obs.failed != 0 || obs.maxTook <= 0 {
		t.Errorf("failed batches = %d, longest = %v; want 0 and > 0", obs.failed, obs.maxTook)
	}
	if d := s.QueueDepth(); d != 0 {
		t.Errorf("QueueDepth() = %d after every Record returned, want 0", d)
	}
}

// TestWatchReadyReportsClose: WatchReady reports the store ready at once,
// then not ready when it is closed, and returns.
func TestWatchReadyReportsClose(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	got := make(chan bool, 4)
	done := make(chan struct{})
	go func() {
		s.WatchReady(context.Background(), func(ready bool) { got <- ready })
		close(done)
	}()
	if r := <-got; !r {
		t.Fatal("first report: not ready, want ready")
	}
	s.Close()
	select {
	case r := <-got:
		if r {
			t.Fatal("report after Close: ready, want not ready")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no report within 5s of Close")
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("WatchReady still running 5s after Close")
	}
}
