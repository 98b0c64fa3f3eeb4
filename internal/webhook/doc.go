// Package webhook pushes fleet transitions to HTTP receivers: each event
// a CloudEvent (structured mode, application/cloudevents+json) POSTed to
// the receiver's URL, signed with HMAC-SHA256 over the body in the
// Policyd-Signature header, and retried with exponential backoff.
//
// The fleet's sink hands events to Notifier.Notify, which never blocks:
// each receiver has a bounded queue and a worker of its own (Run), so a
// slow or dead receiver delays only its own deliveries, and an event that
// finds its queue full is dropped and counted. A decision never waits on a
// webhook.
//
// Four fleet transitions are pushed (policy.WebhookEvents):
//
//   - breaker_opened: a bucket's breaker opened (fleet event breaker_open),
//     once per incident: re-opening after a failed half-open probe is the
//     same incident and is not pushed again;
//   - key_stopped: a key stopped fleet-wide (fleet_stop);
//   - budget_exhausted: a bucket's retry budget is spent (budget_exhausted);
//   - incident_resolved: the breaker closed again (breaker_close), which
//     ends the incident its opening began. A fleet stop ends by expiring,
//     which is no transition, so it resolves nothing.
package webhook
