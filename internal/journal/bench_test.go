package journal_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/policyd/policyd/internal/journal"
)

// BenchmarkRecordParallel records attempts from many goroutines at once,
// as concurrent NextDelay calls do, and reports committed rows per second.
func BenchmarkRecordParallel(b *testing.B) {
	s := openStore(b)
	b.SetParallelism(64) // 64 × GOMAXPROCS callers, like a busy server
	var next atomic.Int64
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		id := uuid.NewString()
		n := 0
		for pb.Next() {
			n++
			if n > journal.MaxAttempt {
				id, n = uuid.NewString(), 1
			}
			_, err := s.Record(ctx, "bench", journal.Attempt{ContextID: id, Attempt: n, FailureType: "RATE_LIMIT",
				Retryable: true, Rule: "status.429", HTTPStatus: 429, Message: "Rate limit reached",
				Decision: journal.DecisionRetry, Delay: time.Second}, journal.Context{Provider: "openai", Model: "gpt-4o"})
			if err != nil {
				b.Error(err)
				return
			}
			next.Add(1)
		}
	})
	b.ReportMetric(float64(next.Load())/time.Since(start).Seconds(), "rows/s")
}

// BenchmarkRecordSerial is one caller at a time: the latency of a lone
// Record (batch window plus one commit).
func BenchmarkRecordSerial(b *testing.B) {
	s := openStore(b)
	ctx := context.Background()
	id := uuid.NewString()
	n := 0
	b.ResetTimer()
	for b.Loop() {
		n++
		if n > journal.MaxAttempt {
			id, n = uuid.NewString(), 1
		}
		if _, err := s.Record(ctx, "bench", journal.Attempt{ContextID: id, Attempt: n}, journal.Context{}); err != nil {
			b.Fatal(err)
		}
	}
}
