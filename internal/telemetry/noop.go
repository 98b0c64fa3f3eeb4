package telemetry

import (
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// The instrumentation falls back to the global providers for a signal it
// is not given; these keep it from touching global state.
func noopTracerProvider() tracenoop.TracerProvider { return tracenoop.NewTracerProvider() }
func noopMeterProvider() metricnoop.MeterProvider  { return metricnoop.NewMeterProvider() }
