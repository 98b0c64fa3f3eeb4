package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	otelprom "go.opentelemetry.io/contrib/bridges/prometheus"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc/stats"
)

// Provider holds the daemon's tracer and meter providers and their OTLP
// exporters. Make one with FromEnv; its Shutdown flushes what is pending.
type Provider struct {
	tp *sdktrace.TracerProvider // nil: traces are not exported
	mp *sdkmetric.MeterProvider // nil: metrics are not exported
}

// Signals says what FromEnv turned on, for the start-up log.
func (p *Provider) Signals() []string {
	var s []string
	if p.tp != nil {
		s = append(s, "traces")
	}
	if p.mp != nil {
		s = append(s, "metrics")
	}
	return s
}

// Config is what the environment asks to export: traces, metrics, and
// the OTLP protocol of each.
type Config struct {
	Traces, Metrics                 bool
	TracesProtocol, MetricsProtocol string // grpc or http/protobuf
}

// Enabled reports whether anything is to be exported.
func (c Config) Enabled() bool { return c.Traces || c.Metrics }

// ConfigFromEnv reads the standard OpenTelemetry environment through
// getenv (os.Getenv in the daemon).
//
// Traces are exported when OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
// OTEL_EXPORTER_OTLP_ENDPOINT is set, metrics when
// OTEL_EXPORTER_OTLP_METRICS_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT is;
// OTEL_TRACES_EXPORTER or OTEL_METRICS_EXPORTER "none" turns one off, and
// OTEL_SDK_DISABLED=true both. The protocol is
// OTEL_EXPORTER_OTLP_{TRACES,METRICS}_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL:
// http/protobuf (the default, as the specification says) or grpc. Any
// other exporter or protocol is an error naming the variable.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	var c Config
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return c, nil
	}
	var err error
	if c.Traces, c.TracesProtocol, err = wanted(getenv, "TRACES"); err != nil {
		return Config{}, err
	}
	if c.Metrics, c.MetricsProtocol, err = wanted(getenv, "METRICS"); err != nil {
		return Config{}, err
	}
	return c, nil
}

// FromEnv is New with ConfigFromEnv(os.Getenv).
func FromEnv(ctx context.Context, version string, opts ...Option) (*Provider, error) {
	c, err := ConfigFromEnv(os.Getenv)
	if err != nil {
		return nil, err
	}
	return New(ctx, c, version, opts...)
}

// Option configures New.
type Option func(*options)

type options struct{ gatherer prometheus.Gatherer }

// WithGatherer also exports g's Prometheus metrics with the OTLP metrics
// (through the OTel Prometheus bridge), read at each export: the daemon's
// own policyd_* metrics, not only the instrumentation's rpc.server.*.
func WithGatherer(g prometheus.Gatherer) Option { return func(o *options) { o.gatherer = g } }

// New returns a Provider exporting what c says over OTLP, or nil when c
// exports nothing. The exporters and the SDK read the rest of the
// environment themselves: the endpoints, headers, timeouts, certificates,
// OTEL_SERVICE_NAME (default policyd) and OTEL_RESOURCE_ATTRIBUTES, the
// sampler (OTEL_TRACES_SAMPLER; default parent-based, always on), the
// batch span processor's OTEL_BSP_* and the metrics' export interval
// (OTEL_METRIC_EXPORT_INTERVAL, default 60 s). version is the
// service.version.
func New(ctx context.Context, c Config, version string, opts ...Option) (*Provider, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if !c.Enabled() {
		return nil, nil
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "policyd"), attribute.String("service.version", version)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	p := &Provider{}
	if c.Traces {
		var exp sdktrace.SpanExporter
		if c.TracesProtocol == "grpc" {
			exp, err = otlptracegrpc.New(ctx)
		} else {
			exp, err = otlptracehttp.New(ctx)
		}
		if err != nil {
			return nil, fmt.Errorf("telemetry: OTLP trace exporter: %w", err)
		}
		p.tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	}
	if c.Metrics {
		var exp sdkmetric.Exporter
		if c.MetricsProtocol == "grpc" {
			exp, err = otlpmetricgrpc.New(ctx)
		} else {
			exp, err = otlpmetrichttp.New(ctx)
		}
		if err != nil {
			_ = p.Shutdown(ctx)
			return nil, fmt.Errorf("telemetry: OTLP metric exporter: %w", err)
		}
		var readerOpts []sdkmetric.PeriodicReaderOption
		if o.gatherer != nil {
			readerOpts = append(readerOpts, sdkmetric.WithProducer(otelprom.NewMetricProducer(otelprom.WithGatherer(o.gatherer))))
		}
		p.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, readerOpts...)), sdkmetric.WithResource(res))
	}
	return p, nil
}

// wanted reports whether signal (TRACES or METRICS) is to be exported, and
// over which protocol.
func wanted(getenv func(string) string, signal string) (bool, string, error) {
	switch exporter := getenv("OTEL_" + signal + "_EXPORTER"); exporter {
	case "", "otlp":
	case "none":
		return false, "", nil
	default:
		return false, "", fmt.Errorf("telemetry: OTEL_%s_EXPORTER=%q: policyd exports over OTLP only (want otlp or none)", signal, exporter)
	}
	if getenv("OTEL_EXPORTER_OTLP_"+signal+"_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" {
		return false, "", nil
	}
	name, p := "OTEL_EXPORTER_OTLP_"+signal+"_PROTOCOL", getenv("OTEL_EXPORTER_OTLP_"+signal+"_PROTOCOL")
	if p == "" {
		name, p = "OTEL_EXPORTER_OTLP_PROTOCOL", getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch p {
	case "":
		return true, "http/protobuf", nil
	case "grpc", "http/protobuf":
		return true, p, nil
	default:
		return false, "", fmt.Errorf("telemetry: %s=%q: want http/protobuf or grpc", name, p)
	}
}

// StatsHandler is the OTel gRPC instrumentation for the server: a span
// per call (continuing the caller's W3C trace context) when traces are
// exported, and the rpc.server.* metrics when metrics are. Health checks
// are left out: probes call them every few seconds and say nothing.
func (p *Provider) StatsHandler() stats.Handler {
	opts := []otelgrpc.Option{
		otelgrpc.WithPropagators(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})),
		otelgrpc.WithFilter(func(info *stats.RPCTagInfo) bool {
			return !strings.HasPrefix(info.FullMethodName, "/grpc.health.v1.Health/")
		}),
	}
	if p.tp != nil {
		opts = append(opts, otelgrpc.WithTracerProvider(p.tp))
	} else {
		opts = append(opts, otelgrpc.WithTracerProvider(noopTracerProvider()))
	}
	if p.mp != nil {
		opts = append(opts, otelgrpc.WithMeterProvider(p.mp))
	} else {
		opts = append(opts, otelgrpc.WithMeterProvider(noopMeterProvider()))
	}
	return otelgrpc.NewServerHandler(opts...)
}

// Shutdown flushes the spans and metrics not yet exported and stops the
// exporters, giving up when ctx ends.
func (p *Provider) Shutdown(ctx context.Context) error {
	var errs []error
	if p.tp != nil {
		errs = append(errs, p.tp.Shutdown(ctx))
	}
	if p.mp != nil {
		errs = append(errs, p.mp.Shutdown(ctx))
	}
	return errors.Join(errs...)
}
