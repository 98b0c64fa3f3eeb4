package fleetevents_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/fleetevents"
	"github.com/policyd/policyd/internal/journal"
)

type recorder []journal.FleetEvent

func (r *recorder) Record(e journal.FleetEvent) { *r = append(*r, e) }

type counter map[string]int

func (c counter) FleetEvent(kind string) { c[kind]++ }

// TestSink: every event is logged (a shed at debug), journaled with its
// bucket's parts and the replica, and counted by kind.
func TestSink(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var rec recorder
	count := counter{}
	key := fleet.Key{Scope: fleet.ScopeAvailability, Tenant: "acme", Provider: "openai", Model: "gpt-4o"}
	at := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	fleetevents.Sink(logger, &rec, count, "replica-a")([]fleet.Event{
		{At: at, Key: key, Kind: fleet.EventBreakerOpen, ClientID: "agent-1", Reason: "5 failures"},
		{At: at, Key: key, Kind: fleet.EventShed, ClientID: "agent-2"},
	})
	if len(rec) != 2 || rec[0].Event != string(fleet.EventBreakerOpen) || rec[0].Tenant != "acme" || rec[0].Bucket != key.String() ||
		rec[0].Scope != "availability" || rec[0].Replica != "replica-a" || rec[0].ClientID != "agent-1" || rec[0].Reason != "5 failures" {
		t.Fatalf("journaled %+v", rec)
	}
	if count[string(fleet.EventBreakerOpen)] != 1 || count[string(fleet.EventShed)] != 1 {
		t.Fatalf("counted %v", count)
	}
	if out := logs.String(); !strings.Contains(out, "fleet "+string(fleet.EventBreakerOpen)) || strings.Contains(out, "fleet "+string(fleet.EventShed)) ||
		!strings.Contains(out, "replica=replica-a") {
		t.Fatalf("logged:\n%s\nwant the opening at info with the replica, the shed only at debug", out)
	}
	fleetevents.Sink(logger, nil, nil, "")([]fleet.Event{{At: at, Key: key, Kind: fleet.EventHoldSet}}) // neither journal nor metrics: logs only
}
