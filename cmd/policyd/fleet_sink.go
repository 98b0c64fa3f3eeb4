package main

import (
	"log/slog"

	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/journal"
	"github.com/policyd/policyd/internal/metrics"
)

// fleetSink logs each fleet transition, journals it when the journal is on
// (rec not nil) and counts it when metrics are (ms not nil). It never
// blocks: the recorder queues and drops when full.
func fleetSink(logger *slog.Logger, rec *journal.FleetEventRecorder, ms *metrics.Metrics) fleet.Sink {
	return func(events []fleet.Event) {
		for _, e := range events {
			logger.Info("fleet "+string(e.Kind), "tenant", e.Key.Tenant, "bucket", e.Key.String(), "client", e.ClientID, "reason", e.Reason)
			if ms != nil {
				ms.FleetEvent(string(e.Kind))
			}
			if rec != nil {
				rec.Record(journal.FleetEvent{
					At: e.At, Tenant: e.Key.Tenant, Bucket: e.Key.String(), Scope: e.Key.Scope.String(),
					Provider: e.Key.Provider, Model: e.Key.Model, KeyID: e.Key.KeyID,
					Event: string(e.Kind), Reason: e.Reason, ClientID: e.ClientID, Counts: e.Counts,
				})
			}
		}
	}
}
