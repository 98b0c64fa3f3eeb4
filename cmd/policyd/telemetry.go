package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/policyd/policyd/internal/metrics"
	"github.com/policyd/policyd/internal/server"
	"github.com/policyd/policyd/internal/telemetry"
)

// startTelemetry installs what cfg.telemetry asks to export: the OTLP
// providers, flushed by lc at stop, and the gRPC server options that trace
// every call; nothing at all when it asks for nothing. ms's metrics, when
// there are any, go with the OTLP metrics.
func startTelemetry(ctx context.Context, cfg *serveConfig, lc *lifecycle, ms *metrics.Metrics) ([]server.GRPCOption, error) {
	if !cfg.telemetry.Enabled() {
		return nil, nil
	}
	var opts []telemetry.Option
	if ms != nil {
		opts = append(opts, telemetry.WithGatherer(ms.Registry()))
	}
	tel, err := telemetry.New(ctx, cfg.telemetry, version, opts...)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	lc.onStop(func() { shutdownTelemetry(tel, cfg.logger) })
	cfg.logger.Info("exporting over OTLP", "signals", tel.Signals())
	return []server.GRPCOption{server.WithStatsHandler(tel.StatsHandler()), server.WithMonitoring(telemetry.UnaryServerInterceptor(), nil)}, nil
}

// shutdownTelemetry flushes the spans and metrics not yet exported,
// giving up after telemetryFlushTimeout.
func shutdownTelemetry(tel *telemetry.Provider, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), telemetryFlushTimeout)
	defer cancel()
	if err := tel.Shutdown(ctx); err != nil {
		logger.Warn("telemetry flush failed", "err", err)
	}
}

// telemetryFlushTimeout bounds the OTLP exporters' last export at stop.
const telemetryFlushTimeout = 3 * time.Second
