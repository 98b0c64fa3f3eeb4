package journal

// MigrateTo migrates to a given schema version (0: nothing), for the
// migration tests.
var MigrateTo = migrateTo

// WithPruneBatch sets how many contexts one Prune statement deletes, so
// that a test can make Prune loop over a small journal.
func WithPruneBatch(n int) Option {
	return func(c *config) { c.pruneBatch = n }
}

// Copies returns how many batches the store wrote with COPY.
func Copies(s *Store) int64 { return s.copies.Load() }
