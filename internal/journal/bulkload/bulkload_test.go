package bulkload_test

import (
	"context"
	"testing"
	"time"

	"github.com/policyd/policyd/internal/journal/bulkload"
	"github.com/policyd/policyd/internal/journal/journaltest"
)

func TestMain(m *testing.M) { journaltest.Main(m) }

func TestLoadWritesRowsTheViewsRead(t *testing.T) {
	t.Parallel()
	url := journaltest.DatabaseURL(t)
	ctx := context.Background()
	n, err := bulkload.Load(ctx, url, 100, 5, time.Now())
	if err != nil || n != 500 {
		t.Fatalf("Load = %d, %v; want 500 rows", n, err)
	}
	if got, err := bulkload.AttemptRows(ctx, url); err != nil || got != 500 {
		t.Fatalf("AttemptRows = %d, %v; want 500", got, err)
	}
	_, rows := journaltest.Query(t, url, "SELECT count(*) FROM journal_failed_contexts")
	if rows[0][0] != "10" {
		t.Errorf("failed contexts = %s, want 10 (one in ten)", rows[0][0])
	}
	if _, err := bulkload.Load(ctx, url, 1, 0, time.Now()); err == nil {
		t.Error("Load with 0 attempts per context: no error")
	}
}
