// Package journal is policyd's RetryContext journal in PostgreSQL: every
// attempt of an operation that may be retried, the decision taken after it,
// and, for contexts that failed, an error report with the root cause, the
// recovery action and the full attempt history. Post-mortems are SQL over
// the tables and the journal_* views (see migrations/001_journal.sql), and
// the incidents view reads the fleet's events and the attempts back as one
// bucket's trouble from its first failure to its recovery (ListIncidents,
// GetIncident; migrations/011_incidents.sql).
//
// It owns the journal's tables, views and migrations (the fleet's tables
// too: one schema, one migrator), and nothing of fleet memory itself: the
// replicas' exchange is internal/fleet/pgexchange. It is one of the few
// storage packages that talk to PostgreSQL (through pgx), and turns database
// errors into the storage errors of package dberr: ErrNotFound,
// ErrUnavailable (down, unreachable or too slow) and ErrInvalid (an
// *InvalidError naming the field).
//
// Writes are durable and shared: Record returns only after the commit
// (synchronous_commit on), and concurrent Record calls are grouped by
// batching writers into shared transactions, so the journal keeps up with
// many concurrent callers at the cost of one commit per batch. Every write
// is idempotent, so a caller that got ErrUnavailable can simply write again
// later.
package journal
