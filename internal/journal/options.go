package journal

import (
	"log/slog"
	"time"
)

// The defaults of WithBatchWindow, WithWriters and WithMessageChars, and
// the bounds of WithMessageChars.
const (
	DefaultBatchWindow  = 0
	DefaultWriters      = 1
	DefaultMessageChars = 512
	MinMessageChars     = 64
	MaxMessageChars     = 16384
)

// Option configures a Store in Open.
type Option func(*config)

type config struct {
	now            func() time.Time
	batchWindow    time.Duration
	maxBatch       int
	logger         *slog.Logger
	timeout        time.Duration
	healthInterval time.Duration
	writers        int
	messageChars   int
	copyMinRows    int
	observer       Observer
	// pruneBatch is how many contexts one Prune statement deletes: each
	// statement is its own short transaction, so pruning a large journal
	// never holds locks (or a long-running snapshot) for long.
	pruneBatch int
}

func defaultConfig() config {
	return config{
		now:            time.Now,
		batchWindow:    DefaultBatchWindow,
		maxBatch:       256,
		logger:         slog.Default(),
		timeout:        5 * time.Second,
		healthInterval: 500 * time.Millisecond,
		pruneBatch:     10000,
		writers:        DefaultWriters,
		messageChars:   DefaultMessageChars,
		copyMinRows:    DefaultCopyMinRows,
		observer:       nopObserver{},
	}
}

// WithClock sets where the store reads the time: the default start of a
// context, the time of an attempt recorded without one, finish and report
// times. Default time.Now; tests pass a fixed clock so that reports are
// byte-for-byte reproducible.
func WithClock(now func() time.Time) Option {
	return func(c *config) {
		if now != nil {
			c.now = now
		}
	}
}

// WithBatchWindow sets how long a writer waits at most, after the first
// Record call of a batch arrives, for more calls to share its commit (it
// stops waiting early once the batch is as large as its previous one, or
// MaxBatch). Default 0: the writer commits whatever is queued at once, and
// the calls that arrive during that commit form the next batch, so batches
// grow with the load by themselves (group commit) and a lone caller never
// waits. A window helps only where calls arrive too spread out to meet in
// the queue but a commit costs much more than the wait; under make bench a
// 2ms window measured 15-25% fewer journaled calls a second than none.
func WithBatchWindow(d time.Duration) Option {
	return func(c *config) {
		if d >= 0 {
			c.batchWindow = d
		}
	}
}

// WithMaxBatch sets how many Record calls at most share one transaction; a
// full batch is written at once, without waiting for the window. Default
// 256: large enough that the commit is amortised (the per-row cost
// dominates beyond about a hundred rows), small enough that a batch is a
// short transaction holding few locks. Values below 1 are ignored.
func WithMaxBatch(n int) Option {
	return func(c *config) {
		if n >= 1 {
			c.maxBatch = n
		}
	}
}

// WithLogger sets where the store logs database outages, recoveries and
// failed batches. Default slog.Default(), so that an unconfigured store
// logs where the process logs.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l != nil {
			c.logger = l
		}
	}
}

// WithTimeout bounds every database round of the store (a batch of writes,
// a read, a finish) so that a database that hangs, rather than refusing,
// still turns into ErrUnavailable and trips the health check. Default 5s:
// far above a healthy commit, short enough that a stalled writer gives up
// while callers still care. Values of zero or less are ignored.
func WithTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.timeout = d
		}
	}
}

// WithHealthInterval sets how often, while the database is marked down, the
// store pings it to find out whether it is back. Default 500ms: a recovered
// database is used again within half a second, at the cost of two
// connection attempts a second during an outage. Values of zero or less are
// ignored.
func WithHealthInterval(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.healthInterval = d
		}
	}
}

// WithWriters sets how many batching writers the store runs, each with its
// own connection and transactions; a context's attempts always go through
// the same writer. Default 1: with the single-statement write path one
// writer's commit is short, and one writer makes the largest batches
// (everything queued during its commit), which costs PostgreSQL and the
// daemon the least CPU per attempt; under make bench two writers measured
// about 10-15% fewer journaled calls a second. More writers help where
// commits are slow (a remote disk) and calls few. Values below 1 are
// ignored.
func WithWriters(n int) Option {
	return func(c *config) {
		if n >= 1 {
			c.writers = n
		}
	}
}

// WithMessageChars sets how many characters of an attempt's error message
// the journal keeps; a longer message is cut on a character boundary and
// ends in "…". Default 512: of the real provider and network failures in
// the conformance corpus, the median message is 99 characters, the 95th
// percentile 377 and the 99th 550, so 512 keeps 98.5 % of them whole, and
// post-mortems the part that names the cause. The message is most of a
// row's WAL (about 1.5 KB a row at 1024 characters), so a shorter one is a
// cheaper commit. Values outside MinMessageChars..MaxMessageChars are
// ignored; policyd serve refuses them (--journal-message-chars).
func WithMessageChars(n int) Option {
	return func(c *config) {
		if n >= MinMessageChars && n <= MaxMessageChars {
			c.messageChars = n
		}
	}
}

// WithCopyMinRows sets from how many attempts on a batch is written with
// COPY instead of one INSERT statement; 0 (the default) never uses COPY.
// COPY costs PostgreSQL less per row but takes three round trips instead
// of one; on the machine measured it did not pay at any batch size the
// writer makes (DefaultCopyMinRows). It may where PostgreSQL's CPU, not
// the commit's latency, limits the journal. Negative values are ignored.
func WithCopyMinRows(n int) Option {
	return func(c *config) {
		if n >= 0 {
			c.copyMinRows = n
		}
	}
}
