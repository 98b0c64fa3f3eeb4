// Package telemetry is the daemon's OpenTelemetry: a span per gRPC call
// (the OTel gRPC instrumentation, as a stats handler), the decision's
// outcome on NextDelay's span, and the instrumentation's RPC metrics, all
// exported over OTLP, and only when the standard OTEL_EXPORTER_OTLP_*
// environment variables name an endpoint. Without one, FromEnv returns nil
// and the daemon installs nothing: no handler, no provider, no cost.
package telemetry
