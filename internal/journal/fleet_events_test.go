package journal_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/policyd/policyd/internal/journal"
	"github.com/policyd/policyd/internal/journal/journaltest"
)

const bucketA = "rate_limit:openai/gpt-4o@key-a"

// fleetEvent is a valid event of tenant acme on bucketA.
func fleetEvent(event string, at time.Time) journal.FleetEvent {
	return journal.FleetEvent{At: at, Tenant: "acme", Bucket: bucketA, Scope: journal.FleetScopeRateLimit,
		Provider: "openai", Model: "gpt-4o", KeyID: "key-a", Event: event, ClientID: "agent-1", Replica: "r1"}
}

func TestFleetEventsRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := newClock(t0)
	s := openStore(t, journal.WithClock(clk.Now))

	hold := fleetEvent(journal.FleetHoldSet, t0.Add(1500*time.Nanosecond)) // cut to microseconds
	hold.Reason = "429 from openai"
	hold.Identity, hold.Peer = "token:0123456789ab", "10.0.0.7:51234"
	hold.Counts = map[string]int64{"failures": 31, "clients": 6, "hold_ms": 10000}
	open := fleetEvent(journal.FleetBreakerOpen, t0.Add(time.Second))
	open.Counts = map[string]int64{"open_ms": 5000}
	other := fleetEvent(journal.FleetStop, t0.Add(2*time.Second))
	other.Bucket, other.Scope = "auth:openai@key-b", journal.FleetScopeAuth
	noTime := fleetEvent(journal.FleetClear, time.Time{}) // takes the store's clock
	clk.Set(t0.Add(3 * time.Second))
	otherTenant := fleetEvent(journal.FleetHoldSet, t0)
	otherTenant.Tenant = "globex"
	wantErr(t, s.RecordFleetEvents(ctx, []journal.FleetEvent{hold, open, other, noTime, otherTenant}), nil)
	wantErr(t, s.RecordFleetEvents(ctx, nil), nil) // nothing to do

	hold.At = t0.Add(time.Microsecond)
	noTime.At = t0.Add(3 * time.Second)
	for _, tt := range []struct {
		name   string
		bucket string
		since  time.Time
		limit  int
		want   []journal.FleetEvent
	}{
		{"bucket", bucketA, time.Time{}, 0, []journal.FleetEvent{noTime, open, hold}},
		{"every bucket", "", time.Time{}, 0, []journal.FleetEvent{noTime, other, open, hold}},
		{"since", "", t0.Add(time.Second), 0, []journal.FleetEvent{noTime, other, open}},
		{"limit", "", time.Time{}, 2, []journal.FleetEvent{noTime, other}},
		{"unknown bucket", "nope", time.Time{}, 0, []journal.FleetEvent{}},
	} {
		got, err := s.ListFleetEvents(ctx, "acme", tt.bucket, tt.since, tt.limit)
		wantErr(t, err, nil)
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tt.name, got, tt.want)
		}
	}
	got, err := s.ListFleetEvents(ctx, "globex", "", time.Time{}, 0)
	wantErr(t, err, nil)
	if !reflect.DeepEqual(got, []journal.FleetEvent{otherTenant}) {
		t.Errorf("globex: got %+v", got)
	}
	_, err = s.ListFleetEvents(ctx, "acme", "", time.Time{}, -1)
	wantField(t, err, "limit")
}

func TestFleetEventsInvalid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t)
	long := strings.Repeat("x", 257)
	for _, tt := range []struct {
		name  string
		edit  func(e *journal.FleetEvent)
		field string
	}{
		{"no bucket", func(e *journal.FleetEvent) { e.Bucket = "" }, "bucket"},
		{"long bucket", func(e *journal.FleetEvent) { e.Bucket = strings.Repeat("b", 1025) }, "bucket"},
		{"bucket not UTF-8", func(e *journal.FleetEvent) { e.Bucket = "\xff" }, "bucket"},
		{"scope", func(e *journal.FleetEvent) { e.Scope = "rate-limit" }, "scope"},
		{"no scope", func(e *journal.FleetEvent) { e.Scope = "" }, "scope"},
		{"event", func(e *journal.FleetEvent) { e.Event = "breaker_opened" }, "event"},
		{"tenant", func(e *journal.FleetEvent) { e.Tenant = long }, "tenant"},
		{"provider", func(e *journal.FleetEvent) { e.Provider = long }, "provider"},
		{"model", func(e *journal.FleetEvent) { e.Model = long }, "model"},
		{"key id", func(e *journal.FleetEvent) { e.KeyID = long }, "key_id"},
		{"client id NUL", func(e *journal.FleetEvent) { e.ClientID = "a\x00b" }, "client_id"},
		{"replica", func(e *journal.FleetEvent) { e.Replica = long }, "replica"},
		{"counts key", func(e *journal.FleetEvent) { e.Counts = map[string]int64{"": 1} }, "counts"},
		{"too many counts", func(e *journal.FleetEvent) {
			e.Counts = map[string]int64{}
			for i := range 33 {
				e.Counts[fmt.Sprint("c", i)] = int64(i)
			}
		}, "counts"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bad := fleetEvent(journal.FleetHoldSet, t0)
			tt.edit(&bad)
			// The bad event is the second: the error names it, and the
			// good first one is not written either.
			err := s.RecordFleetEvents(ctx, []journal.FleetEvent{fleetEvent(journal.FleetHoldSet, t0), bad})
			wantField(t, err, "events[1]."+tt.field)
		})
	}
	got, err := s.ListFleetEvents(ctx, "acme", "", time.Time{}, 0)
	wantErr(t, err, nil)
	if len(got) != 0 {
		t.Fatalf("invalid batches wrote %d events", len(got))
	}

	err = s.RecordFleetEvents(ctx, make([]journal.FleetEvent, journal.MaxFleetEventsPerCall+1))
	wantField(t, err, "events")

	// A long reason is evidence: cut, not refused.
	e := fleetEvent(journal.FleetBreakerOpen, t0)
	e.Reason = strings.Repeat("é", 5000)
	wantErr(t, s.RecordFleetEvents(ctx, []journal.FleetEvent{e}), nil)
	got, err = s.ListFleetEvents(ctx, "acme", "", time.Time{}, 0)
	wantErr(t, err, nil)
	if len(got) != 1 {
		t.Fatalf("listed %d events, want 1", len(got))
	}
	if n := utf8.RuneCountInString(got[0].Reason); n != 1024 || !strings.HasSuffix(got[0].Reason, "…") {
		t.Fatalf("long reason stored as %d characters, want 1024 ending in …", n)
	}
}

func TestFleetEventRecorder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t)

	t.Run("interval", func(t *testing.T) {
		r := s.FleetEventRecorder(journal.WithFleetBatch(200, 20*time.Millisecond))
		defer r.Close()
		e := fleetEvent(journal.FleetHoldSet, t0)
		e.Bucket = "interval"
		r.Record(e)
		deadline := time.Now().Add(5 * time.Second)
		for r.Written() != 1 {
			if time.Now().After(deadline) {
				t.Fatalf("event not written 5s after Record: written %d, dropped %d", r.Written(), r.Dropped())
			}
			time.Sleep(10 * time.Millisecond)
		}
		got, err := s.ListFleetEvents(ctx, "acme", "interval", time.Time{}, 0)
		wantErr(t, err, nil)
		if len(got) != 1 {
			t.Fatalf("listed %d events, want 1", len(got))
		}
	})

	t.Run("close flushes", func(t *testing.T) {
		// An interval far beyond the test: only full batches and Close write.
		r := s.FleetEventRecorder(journal.WithFleetBatch(200, time.Hour))
		const n = 450
		for i := range n {
			e := fleetEvent(journal.FleetHoldSet, t0.Add(time.Duration(i)*time.Millisecond))
			e.Bucket = "close"
			r.Record(e)
		}
		r.Close()
		r.Close() // harmless
		if r.Written() != n || r.Dropped() != 0 {
			t.Fatalf("after Close: written %d, dropped %d; want %d, 0", r.Written(), r.Dropped(), n)
		}
		got, err := s.ListFleetEvents(ctx, "acme", "close", time.Time{}, journal.MaxPageSize)
		wantErr(t, err, nil)
		if len(got) != n {
			t.Fatalf("listed %d events, want %d", len(got), n)
		}
		// Newest first, in the order recorded.
		if !got[0].At.Equal(t0.Add((n-1)*time.Millisecond)) || !got[n-1].At.Equal(t0) {
			t.Fatalf("order: first %v, last %v", got[0].At, got[n-1].At)
		}
		r.Record(fleetEvent(journal.FleetHoldSet, t0)) // after Close: dropped, no panic
		if r.Dropped() != 1 {
			t.Fatalf("Record after Close: dropped %d, want 1", r.Dropped())
		}
	})

	t.Run("invalid dropped", func(t *testing.T) {
		r := s.FleetEventRecorder()
		r.Record(journal.FleetEvent{Bucket: "x"}) // no scope, no event
		r.Close()
		if r.Written() != 0 || r.Dropped() != 1 {
			t.Fatalf("written %d, dropped %d; want 0, 1", r.Written(), r.Dropped())
		}
	})
}

// TestFleetEventRecorderDatabaseDown stops PostgreSQL under a recorder:
// Record never waits, what cannot be written is counted dropped, and Close
// returns within its timeout.
func TestFleetEventRecorderDatabaseDown(t *testing.T) {
	t.Parallel()
	srv := journaltest.NewServer(t) // our own cluster: stopping it disturbs no other test
	s := openStoreAt(t, srv.DatabaseURL(t))
	r := s.FleetEventRecorder(journal.WithFleetBuffer(64), journal.WithFleetBatch(16, 10*time.Millisecond),
		journal.WithFleetCloseTimeout(time.Second))
	srv.Stop(t)

	const n = 5000
	var slowest time.Duration
	for i := range n {
		start := time.Now()
		r.Record(fleetEvent(journal.FleetHoldSet, t0.Add(time.Duration(i)*time.Microsecond)))
		slowest = max(slowest, time.Since(start))
	}
	if slowest > 100*time.Millisecond {
		t.Errorf("slowest Record took %v with the database down, want no waiting", slowest)
	}
	start := time.Now()
	r.Close()
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Close took %v, want about its 1s timeout at most", d)
	}
	if r.Written() != 0 || r.Dropped() != n {
		t.Errorf("written %d, dropped %d; want 0, %d", r.Written(), r.Dropped(), n)
	}
	srv.Start(t) // so that the test's database can be dropped
}

// The Coordinate streams' events (migration 005) are stored like the others.
func TestFleetStreamEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t)
	shed := fleetEvent(journal.FleetShed, t0)
	shed.Bucket, shed.Scope, shed.KeyID = "availability:openai/gpt-4o", journal.FleetScopeAvailability, ""
	shed.Counts = map[string]int64{"shed": 42}
	slow := fleetEvent(journal.FleetSlowStart, t0.Add(time.Second))
	slow.Bucket, slow.Scope, slow.KeyID = shed.Bucket, shed.Scope, ""
	slow.Counts = map[string]int64{"window_ms": 5000}
	wantErr(t, s.RecordFleetEvents(ctx, []journal.FleetEvent{shed, slow}), nil)
	got, err := s.ListFleetEvents(ctx, "acme", shed.Bucket, time.Time{}, 0)
	wantErr(t, err, nil)
	if !reflect.DeepEqual(got, []journal.FleetEvent{slow, shed}) {
		t.Errorf("got %+v", got)
	}
}

// Every transition the fleet journals passes both the store's check and
// the schema's CHECK (a kind added to one and not the other fails here).
func TestEveryFleetEventKindStores(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t)
	kinds := []string{journal.FleetHoldSet, journal.FleetBreakerOpen, journal.FleetBreakerHalfOpen, journal.FleetBreakerClose,
		journal.FleetBudgetExhausted, journal.FleetStop, journal.FleetShed, journal.FleetSlowStart, journal.FleetTenantLimit,
		journal.FleetClear, journal.FleetPace}
	var events []journal.FleetEvent
	for i, k := range kinds {
		e := fleetEvent(k, t0.Add(time.Duration(i)*time.Second))
		e.Reason = "pacing starts: a limit of 600 requests a minute, carried by a 429"
		e.Counts = map[string]int64{"rpm": 600, "share_pct": 93}
		events = append(events, e)
	}
	wantErr(t, s.RecordFleetEvents(ctx, events), nil)
	got, err := s.ListFleetEvents(ctx, "acme", "", time.Time{}, 0)
	wantErr(t, err, nil)
	var gotKinds []string
	for _, e := range got {
		gotKinds = append(gotKinds, e.Event)
	}
	slices.Sort(gotKinds)
	slices.Sort(kinds)
	if !slices.Equal(gotKinds, kinds) {
		t.Fatalf("stored %v, want %v", gotKinds, kinds)
	}
}
