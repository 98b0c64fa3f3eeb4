package server

import (
	"context"
	"log/slog"

	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/journal"
)

// FleetEventRecorder queues fleet events for the journal without blocking
// (*journal.FleetEventRecorder).
type FleetEventRecorder interface{ Record(journal.FleetEvent) }

// FleetEventCounter counts fleet events by kind (internal/metrics).
type FleetEventCounter interface{ FleetEvent(kind string) }

// FleetEventSink logs each fleet transition, journals it when rec is not nil
// and counts it when counter is not nil. It never blocks: the recorder
// queues, and drops when its queue is full.
func FleetEventSink(logger *slog.Logger, rec FleetEventRecorder, counter FleetEventCounter, replica string) fleet.Sink {
	return func(events []fleet.Event) {
		for _, e := range events {
			level := slog.LevelInfo
			if e.Kind == fleet.EventShed {
				level = slog.LevelDebug // up to one a second per bucket while gates shed
			}
			attrs := []any{"tenant", e.Key.Tenant, "bucket", e.Key.String(), "client", e.ClientID, "reason", e.Reason}
			if replica != "" {
				attrs = append(attrs, "replica", replica)
			}
			logger.Log(context.Background(), level, "fleet "+string(e.Kind), attrs...)
			if counter != nil {
				counter.FleetEvent(string(e.Kind))
			}
			if rec != nil {
				rec.Record(journal.FleetEvent{
					At: e.At, Tenant: e.Key.Tenant, Bucket: e.Key.String(), Scope: e.Key.Scope.String(),
					Provider: e.Key.Provider, Model: e.Key.Model, KeyID: e.Key.KeyID,
					Event: string(e.Kind), Reason: e.Reason, ClientID: e.ClientID, Counts: e.Counts, Replica: replica,
				})
			}
		}
	}
}
