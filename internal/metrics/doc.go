// Package metrics is policyd's Prometheus instrumentation: a registry of
// its own (never the global one) with the gRPC server's metrics, the
// decisions NextDelay takes, the journal's batches, queue and health, and
// the Go runtime and process collectors; and the HTTP server that exposes
// them on --metrics-listen with /metrics, /healthz and /readyz (and, handed
// to it by the daemon, the status page).
//
// The packages it observes know nothing of Prometheus: the server tells a
// server.DecisionObserver, the journal a journal.Observer, and Metrics is
// both. Every label takes values from a bounded set (gRPC methods and
// codes, the policy's profiles, the failure types and actions of the API),
// never from request data such as a context id.
package metrics
