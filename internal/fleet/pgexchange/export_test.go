package pgexchange

import "time"

// WithPingInterval sets how long the exchange's listener waits for a
// notification before it pings its connection, so that a test can go
// through many idle waits quickly.
func WithPingInterval(d time.Duration) Option {
	return func(c *config) { c.pingEvery = d }
}
