// Package server is policyd's gRPC layer: the PolicyService implementation,
// request validation, and the grpc.Server that carries it with request ids,
// logging, panic recovery, health checking (JournalService's health follows
// the journal's database) and reflection, and, through Security,
// authentication and tenants (internal/auth), TLS, a per-tenant rate limit
// and request limits. Metrics plug in from outside (WithMonitoring,
// WithDecisionObserver), so this package does not depend on a metrics
// library.
//
// Handlers return plain Go errors; they become gRPC status codes in one
// place, toStatus, so that clients see InvalidArgument naming the bad field
// for a validation error, NotFound for an unknown profile in GetProfile, and
// an opaque Internal for anything else.
package server
