package policyd_test

import (
	"context"
	"os"
	"testing"
	"time"

	policyd "github.com/policyd/policyd/clients/go"
	policydv1 "github.com/policyd/policyd/clients/go/internal/gen/policyd/v1"
)

// A run that ends while policyd is away is still finished: the client
// retries FinishContext in the background, without delaying the caller,
// and the context ends RESOLVED once policyd is back.
func TestJournalFinishesAfterDaemonRestart(t *testing.T) {
	t.Parallel()
	journalDaemonAddr(t) // skips (or fails) without a database
	url := os.Getenv("TEST_DATABASE_URL")
	d, err := startDaemon("127.0.0.1:0", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.stop() })
	addr := d.addr

	srv := newFlaky(t, step{status: 503, body: overloadedBody}, step{status: 200})
	c := newClient(t, addr, policyd.WithJournal(true), policyd.WithClock(newFakeClock()),
		policyd.WithDaemonTimeout(300*time.Millisecond))
	call := openai
	call.ContextID = uuid4(t)
	start := time.Now()
	err = c.Do(context.Background(), call, func(ctx context.Context, attempt int) error {
		if attempt == 2 {
			d.stop() // policyd goes away after deciding the retry, before the call ends
		}
		return chat(srv.URL)(ctx, attempt)
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Do took %v with policyd gone at the end; finishing must not hold the caller", took)
	}

	d2, err := startDaemon(addr, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d2.stop() })
	_, journal := rawClients(t, addr)
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := journal.GetContext(context.Background(), &policydv1.GetContextRequest{ContextId: call.ContextID})
		if err == nil && got.GetContext().GetOutcome() == policydv1.Outcome_OUTCOME_RESOLVED {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("context after policyd came back: %v, %v; want RESOLVED", got.GetContext(), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
