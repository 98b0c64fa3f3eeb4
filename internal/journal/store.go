package journal

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Store is the journal: contexts, attempts and error reports in PostgreSQL.
// It is safe for concurrent use. Attempts are written by batching writers
// that group concurrent Record calls into shared transactions (see Record,
// WithWriters); everything else runs directly on the pool.
//
// A Store watches the database: after a failure that means the database is
// down it answers ErrUnavailable at once (Healthy reports false) instead of
// making every caller wait for a connection attempt, and a background check
// marks it healthy again once the database answers. The pool reconnects by
// itself.
type Store struct {
	pool      *pgxpool.Pool
	writePool *pgxpool.Pool // the batching writers' own connections, one each
	cfg       config

	mu     sync.RWMutex // guards closed against sends on queues
	closed bool
	queues []chan *pending // one per writer; a context always goes to the same one

	healthy   atomic.Bool
	copies    atomic.Int64 // batches written with COPY (tests check the path is taken)
	lastErrMu sync.Mutex
	lastErr   error

	readyMu      sync.Mutex
	readyChanged chan struct{} // closed and replaced when Ready's answer changes (WatchReady)

	stop       chan struct{}
	writers    sync.WaitGroup
	healthDone chan struct{}
	closeOnce  sync.Once

	typeText atomic.Pointer[func(failureType string) TypeText]
}

// SetTypeText makes reports take each failure type's recovery and manual
// action from fn (the classification rules data, which the server holds).
func (s *Store) SetTypeText(fn func(failureType string) TypeText) { s.typeText.Store(&fn) }

func (s *Store) typeTextFunc() func(string) TypeText {
	if p := s.typeText.Load(); p != nil {
		return *p
	}
	return nil
}

// Open connects to the database at databaseURL (a PostgreSQL URL or
// keyword/value string, as pgx accepts; pool settings such as
// pool_max_conns go in it) and starts the batching writers. It pings the
// database once so that a wrong URL or password shows at start-up; after
// that the store survives outages and reconnects by itself. The schema must
// already be migrated (Migrate).
//
// Every connection runs with synchronous_commit on, whatever the server or
// the role says: a write the store acknowledges has reached the disk (or the
// synchronous standby).
func Open(ctx context.Context, databaseURL string, opts ...Option) (*Store, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	poolCfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("open journal: %w", invalid("database_url", "%v", err))
	}
	poolCfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	if poolCfg.ConnConfig.RuntimeParams["application_name"] == "" {
		poolCfg.ConnConfig.RuntimeParams["application_name"] = "policyd"
	}
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return nil, fmt.Errorf("open journal: %w", err)
	}
	pingCtx, cancel := context.WithTimeoutCause(ctx, cfg.timeout, errOpTimeout)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, translate(pingCtx, "open journal: ping database", err)
	}
	// The writers' statements find contexts by primary key only. On a
	// young table (few pages, no statistics yet) the planner prefers
	// sequential scans and caches those plans per connection, so every
	// commit would read the whole table as it grows; with sequential scans
	// off on the writers' connections the plans use the indexes.
	// They also plan their prepared statements once (generic plans): the
	// planner would otherwise re-plan each of the first executions and any
	// statement whose custom plan it judges cheaper, about 100 µs a batch
	// for batches under about 10 rows, for the same index plan.
	writeCfg := poolCfg.Copy()
	writeCfg.ConnConfig.RuntimeParams["enable_seqscan"] = "off"
	writeCfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	writeCfg.MaxConns = int32(cfg.writers)
	writePool, err := pgxpool.NewWithConfig(ctx, writeCfg)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("open journal: %w", err)
	}
	s := &Store{
		pool:         pool,
		writePool:    writePool,
		cfg:          cfg,
		stop:         make(chan struct{}),
		healthDone:   make(chan struct{}),
		readyChanged: make(chan struct{}),
	}
	s.healthy.Store(true)
	for range cfg.writers {
		q := make(chan *pending, 4*cfg.maxBatch)
		s.queues = append(s.queues, q)
		s.writers.Add(1)
		go s.writeLoop(q)
	}
	go s.healthLoop()
	return s, nil
}

// Close writes what the batching writers still hold, stops the health check
// and closes the pool. Record calls after Close return ErrUnavailable. Close
// is safe to call more than once.
func (s *Store) Close() {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		for _, q := range s.queues {
			close(q)
		}
		s.mu.Unlock()
		s.readyChange()
		s.writers.Wait()
		close(s.stop)
		<-s.healthDone
		s.writePool.Close()
		s.pool.Close()
	})
}

// Healthy reports whether the last use of the database succeeded (or the
// background check found it back). It costs an atomic load, so the server
// can ask before every journaled call and skip journaling at once while the
// database is down.
func (s *Store) Healthy() bool { return s.healthy.Load() }

// Ready returns nil when the store is healthy, else an error wrapping
// ErrUnavailable with the failure that marked it down. Like Healthy it does
// not touch the database, so a readiness probe can call it freely.
func (s *Store) Ready(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	closed := s.closed
	s.mu.RUnlock()
	if closed {
		return fmt.Errorf("journal: %w: store closed", ErrUnavailable)
	}
	if s.healthy.Load() {
		return nil
	}
	s.lastErrMu.Lock()
	cause := s.lastErr
	s.lastErrMu.Unlock()
	if cause == nil {
		return fmt.Errorf("journal: %w", ErrUnavailable)
	}
	if errors.Is(cause, ErrUnavailable) {
		return fmt.Errorf("journal: %w", cause)
	}
	return fmt.Errorf("journal: %w: %w", ErrUnavailable, cause)
}

// errDown is what calls get while the store is marked down.
func (s *Store) errDown(op string) error {
	return fmt.Errorf("%s: %w: database marked down, waiting for it to answer again", op, ErrUnavailable)
}

// observe records the outcome of a database round: an ErrUnavailable marks
// the store down until the health check finds the database back.
func (s *Store) observe(err error) {
	// A transaction that lost a race with another one is no outage.
	if err == nil || !errors.Is(err, ErrUnavailable) || isRetryableConflict(err) {
		return
	}
	s.lastErrMu.Lock()
	s.lastErr = err
	s.lastErrMu.Unlock()
	if s.healthy.Swap(false) {
		s.cfg.logger.Warn("journal database unavailable; journaling paused until it answers again", "error", err)
		s.readyChange()
	}
}

// healthyPingTicks is how many health intervals pass between the pings of
// a healthy store (5s by default).
const healthyPingTicks = 10

// healthLoop pings the database every healthInterval while the store is
// marked down, and marks it healthy when a ping succeeds.
//
// While the store is healthy the callers' own rounds notice an outage; so
// that an idle daemon notices it too (its readiness, WatchReady, follows
// the database, not the traffic), it also pings every healthyPingTicks
// intervals, unless every connection of the pool is in use: then traffic
// will notice an outage, and a ping queued behind it could time out and
// mark a merely busy database down.
func (s *Store) healthLoop() {
	defer close(s.healthDone)
	t := time.NewTicker(s.cfg.healthInterval)
	defer t.Stop()
	ticks := 0
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		if s.healthy.Load() {
			if ticks++; ticks < healthyPingTicks || s.poolSaturated() {
				continue
			}
			ticks = 0
			ctx, cancel := context.WithTimeoutCause(context.Background(), min(s.cfg.timeout, 2*s.cfg.healthInterval), errOpTimeout)
			s.observe(translate(ctx, "ping", s.pool.Ping(ctx)))
			cancel()
			continue
		}
		ctx, cancel := context.WithTimeoutCause(context.Background(), min(s.cfg.timeout, 2*s.cfg.healthInterval), errOpTimeout)
		err := s.pool.Ping(ctx)
		cancel()
		if err != nil {
			s.lastErrMu.Lock()
			s.lastErr = translate(ctx, "ping", err)
			s.lastErrMu.Unlock()
			continue
		}
		if !s.healthy.Swap(true) {
			s.cfg.logger.Info("journal database answers again; journaling resumed")
			s.readyChange()
		}
	}
}

func (s *Store) poolSaturated() bool {
	st := s.pool.Stat()
	return st.AcquiredConns() >= st.MaxConns()
}

// run runs fn under the store's timeout, refusing at once while the store
// is marked down, and translates its error.
func (s *Store) run(ctx context.Context, op string, fn func(ctx context.Context) error) error {
	if !s.healthy.Load() {
		return s.errDown(op)
	}
	opCtx, cancel := context.WithTimeoutCause(ctx, s.cfg.timeout, errOpTimeout)
	defer cancel()
	err := translate(opCtx, op, fn(opCtx))
	s.observe(err)
	return err
}

// now is the store's clock, truncated to what PostgreSQL keeps.
func (s *Store) now() time.Time { return dbTime(s.cfg.now()) }

// dbTime is t as PostgreSQL returns it: microseconds, UTC.
func dbTime(t time.Time) time.Time { return t.Truncate(time.Microsecond).UTC() }
