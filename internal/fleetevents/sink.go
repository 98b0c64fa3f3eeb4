// Package fleetevents is where the fleet's transitions go (fleet.Sink): a
// log line each, a row in the journal's fleet_events, a count in the
// metrics. The fleet only emits events; the daemon's composition root
// decides where they go.
package fleetevents

import (
	"context"
	"log/slog"

	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/journal"
)

// Recorder queues fleet events for the journal without blocking
// (*journal.FleetEventRecorder).
type Recorder interface{ Record(journal.FleetEvent) }

// Counter counts fleet events by kind (internal/metrics).
type Counter interface{ FleetEvent(kind string) }

// Sink logs each fleet transition, journals it when rec is not nil
// and counts it when counter is not nil. It never blocks: the recorder
// queues, and drops when its queue is full.
func Sink(logger *slog.Logger, rec Recorder, counter Counter, replica string) fleet.Sink {
	return func(events []fleet.Event) {
		for _, e := range events {
			level := slog.LevelInfo
			if e.Kind == fleet.EventShed {
				level = slog.LevelDebug // up to one a second per bucket while gates shed
			}
			attrs := []any{"tenant", e.Key.Tenant, "bucket", e.Key.String(), "client", e.ClientID, "reason", e.Reason}
			if e.Origin != (fleet.Origin{}) {
				attrs = append(attrs, "identity", e.Origin.Identity, "peer", e.Origin.Peer)
			}
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
					Identity: clip(e.Origin.Identity), Peer: clip(e.Origin.Peer),
				})
			}
		}
	}
}

// clip cuts s to the journal's 256 characters for a name.
func clip(s string) string {
	if r := []rune(s); len(r) > 256 {
		return string(r[:256])
	}
	return s
}
