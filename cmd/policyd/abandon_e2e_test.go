package main

import (
	"context"
	"testing"
	"time"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/journal/journaltest"
)

// serve --abandon-after runs the sweeper: a context left in progress (its
// agent gone) is marked abandoned, so the views stop counting it as running.
func TestServeAbandonsIdleContextsE2E(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	url := journaltest.EmptyDatabaseURL(t)
	d := startDaemon(t, ctx, "--database-url", url, "--abandon-after", "2s")
	jc := policydv1.NewJournalServiceClient(d.conn(t))
	id := "0191d7a8-7c2e-7b3a-9c1d-2f6e8a4b5c6d"
	if _, err := jc.BeginContext(ctx, &policydv1.BeginContextRequest{ContextId: id, Agent: "gone", Provider: "openai"}); err != nil {
		t.Fatal(err)
	}
	for {
		got, err := jc.GetContext(ctx, &policydv1.GetContextRequest{ContextId: id})
		if err != nil {
			t.Fatal(err)
		}
		if got.GetContext().GetOutcome() == policydv1.Outcome_OUTCOME_ABANDONED {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("outcome %v after a minute, want ABANDONED after --abandon-after 2s", got.GetContext().GetOutcome())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
