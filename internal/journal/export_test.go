package journal

import "time"

// MigrateTo migrates to a given schema version (0: nothing), for the
// migration tests.
var MigrateTo = migrateTo

// WithPruneBatch sets how many contexts one Prune statement deletes, so
// that a test can make Prune loop over a small journal.
func WithPruneBatch(n int) Option {
	return func(c *config) { c.pruneBatch = n }
}

// WithExchangePingInterval sets how long the exchange's listener waits for
// a notification before it pings its connection, so that a test can go
// through many idle waits quickly.
func WithExchangePingInterval(d time.Duration) ExchangeOption {
	return func(c *exchangeConfig) { c.pingEvery = d }
}

// Copies returns how many batches the store wrote with COPY.
func Copies(s *Store) int64 { return s.copies.Load() }
