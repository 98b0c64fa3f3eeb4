package journal_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/policyd/policyd/internal/journal"
	"github.com/policyd/policyd/internal/journal/journaltest"
)

func TestMain(m *testing.M) { journaltest.Main(m) }

// t0 is the start of every test's fixed clock.
var t0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

// clock is a settable clock for WithClock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock(at time.Time) *clock { return &clock{now: at} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Set(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = at
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// openStore opens a store on a fresh database, closed when t ends.
func openStore(t testing.TB, opts ...journal.Option) *journal.Store {
	t.Helper()
	return openStoreAt(t, journaltest.DatabaseURL(t), opts...)
}

func openStoreAt(t testing.TB, url string, opts ...journal.Option) *journal.Store {
	t.Helper()
	s, err := journal.Open(context.Background(), url, append([]journal.Option{journal.WithLogger(quiet)}, opts...)...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(s.Close)
	s.SetTypeText(testTypeText)
	return s
}

// testTypeText stands in for the classification rules data, which the
// server installs (internal/server checks that wiring against the real
// rules): the manual actions the report and view tests expect.
func testTypeText(failureType string) journal.TypeText {
	return map[string]journal.TypeText{
		"AUTH_INVALID":    {Recovery: "Fix the API credentials; retrying will not help.", ManualAction: "Fix the API credentials"},
		"QUOTA_EXHAUSTED": {Recovery: "Add credits or raise the quota; retrying will not help.", ManualAction: "Add credits or raise the quota"},
	}[failureType]
}

// wantErr fails t unless err matches want (nil: no error).
func wantErr(t testing.TB, err, want error) {
	t.Helper()
	if want == nil && err != nil {
		t.Fatalf("error = %v, want none", err)
	}
	if want != nil && !errors.Is(err, want) {
		t.Fatalf("error = %v, want %v", err, want)
	}
}

// wantField fails t unless err is an *journal.InvalidError naming field.
func wantField(t testing.TB, err error, field string) {
	t.Helper()
	ie, ok := errors.AsType[*journal.InvalidError](err)
	if !ok || !errors.Is(err, journal.ErrInvalid) {
		t.Fatalf("error = %v, want an InvalidError naming %q", err, field)
	}
	if ie.Field != field {
		t.Fatalf("error names field %q (%v), want %q", ie.Field, err, field)
	}
}

func begin(t testing.TB, s *journal.Store, c journal.Context) journal.Context {
	t.Helper()
	got, _, err := s.BeginContext(context.Background(), c)
	if err != nil {
		t.Fatalf("BeginContext: %v", err)
	}
	return got
}

func record(t testing.TB, s *journal.Store, tenant string, a journal.Attempt) bool {
	t.Helper()
	inserted, err := s.Record(context.Background(), tenant, a, journal.Context{})
	if err != nil {
		t.Fatalf("Record(%s #%d): %v", a.ContextID, a.Attempt, err)
	}
	return inserted
}
