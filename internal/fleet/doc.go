// Package fleet is policyd's fleet memory: what the failures of every agent
// behind the daemon say about the next one's retry. It keeps, per bucket (a
// tenant, provider, model and key, as the failure's scope draws it):
//
//   - a hold: a server's delay hint shared with every agent on the bucket,
//     released in staggered slots so the waiters do not return as one herd;
//   - a stop: a revoked key, a missing permission or an exhausted quota stops
//     every agent on that key for a while, renewed by new failures;
//   - a circuit breaker: enough overload, server-error, timeout and
//     connection failures from at least three clients open it, and a few
//     probes for the whole fleet test whether the provider is back;
//   - a retry budget: a token bucket every retry draws from, so the fleet's
//     retries stay a small fraction of its traffic however many processes it
//     has and however long they live.
//
// Decisions read memory only (no database round trip); the clock and the
// random source are injected, so tests and the simulation are deterministic.
// Every transition is an Event for the journal.
package fleet
