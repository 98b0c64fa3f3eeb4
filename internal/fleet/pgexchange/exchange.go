// Package pgexchange is where the replicas of one fleet meet in PostgreSQL:
// it implements fleet.Exchange over the tables fleet_state and
// fleet_replicas (migrations/006_fleet_state.sql), with holds and stops as
// forward-only registers, the breaker moved by compare-and-set, probe slots
// and each replica's counts. Every write that changes a verdict notifies the
// channel policyd_fleet in its own statement, so that the notification goes
// out exactly when the change commits; a pgnotify.Notifier on a session of
// its own turns notifications into Wake.
//
// Two rules follow from LISTEN/NOTIFY:
//
//   - The listener needs a session of its own: the database URL must not go
//     through a pooler in transaction mode (PgBouncer's transaction pooling
//     drops LISTEN between transactions, and Wake would never fire; the
//     replicas would then see changes only when they read for another
//     reason). Session pooling or a direct connection work.
//   - NOTIFY is never sent from inside a journal transaction: only the
//     exchange's own single-statement writes notify, so a notification never
//     waits for (or is lost with) a journal batch.
//
// Times are the fleet's clock, which the callers pass (hold and stop ends,
// the breaker's open end, the probe slot's time, counts' At); PostgreSQL's
// clock only stamps updated_at, for Sweep. Durations are stored as
// milliseconds and times to the microsecond.
package pgexchange

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/policyd/policyd/internal/dberr"
	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/pgnotify"
)

// Exchange is the PostgreSQL fleet.Exchange. It is safe for concurrent use.
// It has its own small pool (two connections, application_name
// "policyd-fleet") and, besides it, the notifier's listening session.
type Exchange struct {
	pool *pgxpool.Pool
	cfg  config

	wake chan struct{}
	// ownPIDs are the backend process ids of the pool's connections: the
	// exchange's own notifications do not wake it.
	ownPIDs sync.Map

	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
}

var _ fleet.Exchange = (*Exchange)(nil)

// fleetChannel is the channel of the verdicts' notifications.
const fleetChannel = "policyd_fleet"

// fleetLock is taken (for the transaction) by every write that draws a value
// of fleet_seq, before it draws it. A sequence is not transactional: without
// the lock, a writer could draw 10, another 11 and commit first, a replica
// read 11 and go on from there, and never see 10 when it commits. Under the
// lock the values become visible in the order they are drawn (a transaction
// is visible before its locks are released). The writes are few (changes
// of verdicts, and each replica's counts once a second), so serialising
// them costs nothing that matters; it also spares concurrent multi-row
// upserts from deadlocking on each other's rows.
const fleetLock = `SELECT pg_advisory_xact_lock(hashtextextended('policyd_fleet_seq', 0))`

// The exchange's default settings.
const (
	maxConns       = 2
	appName        = "policyd-fleet"
	defaultTimeout = 5 * time.Second
	// maxWhyLen is the longest reason stored (stop_why, open_why; the
	// schema checks it): a reason is cut rather than refused.
	maxWhyLen = 1024
)

// Option configures an Exchange in Open.
type Option func(*config)

type config struct {
	logger    *slog.Logger
	timeout   time.Duration
	pingEvery time.Duration
}

// WithLogger sets where the exchange logs its listener's outages and
// recoveries. Default slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l != nil {
			c.logger = l
		}
	}
}

// WithTimeout bounds every database round of the exchange (besides the
// caller's context), so that a database that hangs rather than refuses
// still gives an error. Default 5s. Values of zero or less are ignored.
func WithTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.timeout = d
		}
	}
}

// Open connects to the database at databaseURL (the schema must be
// migrated: journal.Migrate) and starts the listener. It pings the database
// once, so that a wrong URL shows at start-up; after that the exchange
// survives outages: calls fail with an error wrapping dberr.ErrUnavailable
// while the database is away, and the pool and the listener reconnect by
// themselves. The pool has two connections whatever the URL's
// pool_max_conns says; application_name is "policyd-fleet" unless the URL
// sets one. Close it when done.
func Open(ctx context.Context, databaseURL string, opts ...Option) (*Exchange, error) {
	cfg := config{logger: slog.Default(), timeout: defaultTimeout, pingEvery: pgnotify.DefaultPingEvery}
	for _, o := range opts {
		o(&cfg)
	}
	poolCfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("open fleet exchange: %w", dberr.Invalid("database_url", "%v", err))
	}
	if poolCfg.ConnConfig.RuntimeParams["application_name"] == "" {
		poolCfg.ConnConfig.RuntimeParams["application_name"] = appName
	}
	poolCfg.MaxConns = maxConns
	poolCfg.MinConns = 0
	x := &Exchange{
		cfg:  cfg,
		wake: make(chan struct{}, 1),
		done: make(chan struct{}),
	}
	notifier := &pgnotify.Notifier{
		ConnConfig: poolCfg.ConnConfig.Copy(),
		Channel:    fleetChannel,
		Name:       "fleet exchange",
		Logger:     cfg.logger,
		Timeout:    cfg.timeout,
		PingEvery:  cfg.pingEvery,
		Ignore: func(pid uint32) bool {
			_, own := x.ownPIDs.Load(pid)
			return own
		},
		Notify: x.signal,
	}
	poolCfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		x.ownPIDs.Store(c.PgConn().PID(), struct{}{})
		return nil
	}
	poolCfg.BeforeClose = func(c *pgx.Conn) { x.ownPIDs.Delete(c.PgConn().PID()) }
	x.pool, err = pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return nil, fmt.Errorf("open fleet exchange: %w", err)
	}
	pingCtx, cancel := context.WithTimeoutCause(ctx, cfg.timeout, dberr.ErrOpTimeout)
	defer cancel()
	if err := x.pool.Ping(pingCtx); err != nil {
		x.pool.Close()
		return nil, dberr.Translate(pingCtx, "open fleet exchange: ping database", err)
	}
	listenCtx, stop := context.WithCancel(context.Background())
	x.cancel = stop
	go func() {
		defer close(x.done)
		notifier.Run(listenCtx)
	}()
	return x, nil
}

// OpenN opens n exchanges on the database at databaseURL, as n replicas
// would, and returns them with a function that closes them all: the
// simulation's replica runs over PostgreSQL.
func OpenN(ctx context.Context, databaseURL string, n int, opts ...Option) ([]fleet.Exchange, func(), error) {
	var opened []*Exchange
	closeAll := func() {
		for _, x := range opened {
			x.Close()
		}
	}
	exs := make([]fleet.Exchange, 0, n)
	for range n {
		x, err := Open(ctx, databaseURL, opts...)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		opened = append(opened, x)
		exs = append(exs, x)
	}
	return exs, closeAll, nil
}

// Close stops the listener and closes its connection and the pool. Calls
// after Close fail with ErrUnavailable. Close is safe to call more than
// once.
func (x *Exchange) Close() {
	x.closeOnce.Do(func() {
		x.cancel()
		<-x.done
		x.pool.Close()
	})
}

// Wake is signalled (a buffered channel of one: signals while nobody reads
// merge into one) when another replica changed a verdict, and after the
// listener (re)connected.
func (x *Exchange) Wake() <-chan struct{} { return x.wake }

func (x *Exchange) signal() {
	select {
	case x.wake <- struct{}{}:
	default:
	}
}

// run runs fn under the exchange's timeout and translates its error.
func (x *Exchange) run(ctx context.Context, op string, fn func(ctx context.Context) error) error {
	opCtx, cancel := context.WithTimeoutCause(ctx, x.cfg.timeout, dberr.ErrOpTimeout)
	defer cancel()
	return dberr.Translate(opCtx, "fleet exchange: "+op, fn(opCtx))
}

// keyArgs are the key's columns: tenant, scope, provider, model, key_id.
func keyArgs(k fleet.Key) ([]any, error) {
	scope := k.Scope.String()
	if scope == "" {
		return nil, dberr.Invalid("scope", "%d is not a fleet scope", k.Scope)
	}
	return []any{k.Tenant, scope, k.Provider, k.Model, k.KeyID}, nil
}

// keyWhere matches the key's row with keyArgs as $1..$5.
const keyWhere = `tenant = $1 AND scope = $2 AND provider = $3 AND model = $4 AND key_id = $5`

// dbTimeOrNull is t for a timestamptz column, NULL for the zero time.
func dbTimeOrNull(t time.Time) pgtype.Timestamptz {
	if t.IsZero() {
		return pgtype.Timestamptz{}
	}
	return pgtype.Timestamptz{Time: t, Valid: true}
}

// fleetTime is a timestamptz column read back: UTC, the zero time for NULL.
func fleetTime(t pgtype.Timestamptz) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return t.Time.UTC()
}

// cutWhy cuts a reason to what the schema keeps.
func cutWhy(s string) string {
	if utf8.RuneCountInString(s) <= maxWhyLen {
		return s
	}
	return string([]rune(s)[:maxWhyLen])
}

// raiseRegistersSQL moves each row's hold and stop forward (GREATEST ignores
// NULL: an absent register in the input moves nothing). The DO UPDATE's
// WHERE leaves the rows where nothing moves as they are: no new seq, no
// rewrite, no notification. The notification is sent once when any row
// moved, with the change (at its commit).
const raiseRegistersSQL = `
WITH v AS (
    SELECT *
    FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[],
                $6::timestamptz[], $7::bigint[], $8::timestamptz[], $9::text[])
         AS v (tenant, scope, provider, model, key_id, hold_until, hold_span_ms, stop_until, stop_why)
), up AS (
    INSERT INTO fleet_state AS s (tenant, scope, provider, model, key_id,
                                  hold_until, hold_span_ms, stop_until, stop_why, seq, updated_at)
    SELECT tenant, scope, provider, model, key_id, hold_until, hold_span_ms, stop_until, stop_why,
           nextval('fleet_seq'), now()
    FROM v
    ON CONFLICT (tenant, scope, provider, model, key_id) DO UPDATE SET
        hold_until   = GREATEST(s.hold_until, excluded.hold_until),
        hold_span_ms = CASE WHEN excluded.hold_until > coalesce(s.hold_until, '-infinity')
                            THEN excluded.hold_span_ms ELSE s.hold_span_ms END,
        stop_until   = GREATEST(s.stop_until, excluded.stop_until),
        stop_why     = CASE WHEN excluded.stop_until > coalesce(s.stop_until, '-infinity')
                            THEN excluded.stop_why ELSE s.stop_why END,
        seq          = nextval('fleet_seq'),
        updated_at   = now()
    WHERE excluded.hold_until > coalesce(s.hold_until, '-infinity')
       OR excluded.stop_until > coalesce(s.stop_until, '-infinity')
    RETURNING 1
)
SELECT pg_notify('` + fleetChannel + `', 'registers') FROM (SELECT 1 FROM up LIMIT 1) AS moved`

// clearRegistersSQL empties the hold and stop a clear names ($6 bits: 1
// hold, 2 stop) and records the clear, unless the row has a later one.
const clearRegistersSQL = `
WITH up AS (
    INSERT INTO fleet_state AS s (tenant, scope, provider, model, key_id, cleared_at, cleared, seq, updated_at)
    VALUES ($1, $2, $3, $4, $5, $7, $6, nextval('fleet_seq'), now())
    ON CONFLICT (tenant, scope, provider, model, key_id) DO UPDATE SET
        hold_until   = CASE WHEN $6::smallint & 1 <> 0 THEN NULL ELSE s.hold_until END,
        hold_span_ms = CASE WHEN $6::smallint & 1 <> 0 THEN 0 ELSE s.hold_span_ms END,
        stop_until   = CASE WHEN $6::smallint & 2 <> 0 THEN NULL ELSE s.stop_until END,
        stop_why     = CASE WHEN $6::smallint & 2 <> 0 THEN '' ELSE s.stop_why END,
        cleared_at   = excluded.cleared_at,
        cleared      = excluded.cleared,
        seq          = nextval('fleet_seq'),
        updated_at   = now()
    WHERE excluded.cleared_at > coalesce(s.cleared_at, '-infinity')
    RETURNING 1
)
SELECT pg_notify('` + fleetChannel + `', 'clear') FROM up`

// ClearRegisters empties the hold and the stop v.Cleared names, and
// records the clear at v.ClearedAt, unless the row has a later clear; it
// notifies the other replicas when it wrote.
func (x *Exchange) ClearRegisters(ctx context.Context, v fleet.Verdict) error {
	const op = "clear registers"
	args, err := keyArgs(v.Key)
	if err == nil && v.ClearedAt.IsZero() {
		err = dberr.Invalid("cleared_at", "is required")
	}
	if err != nil {
		return fmt.Errorf("fleet exchange: %s: %w", op, err)
	}
	args = append(args, v.Cleared.Bits(), dbTimeOrNull(v.ClearedAt))
	return x.run(ctx, op, func(ctx context.Context) error {
		b := &pgx.Batch{}
		b.Queue(fleetLock)
		b.Queue(clearRegistersSQL, args...)
		return execBatch(ctx, x.pool, b)
	})
}

// RaiseRegisters moves each verdict's hold and stop forward to its
// HoldUntil (with HoldSpan) and StopUntil (with StopWhy), never back; a zero
// time raises nothing. The breaker fields are ignored. Verdicts of the same
// key are merged. Changed rows take a new seq and notify the other replicas,
// all in one statement.
func (x *Exchange) RaiseRegisters(ctx context.Context, vs []fleet.Verdict) error {
	const op = "raise registers"
	merged := make(map[fleet.Key]fleet.Verdict, len(vs))
	for _, v := range vs {
		if v.HoldUntil.IsZero() && v.StopUntil.IsZero() {
			continue
		}
		if _, err := keyArgs(v.Key); err != nil {
			return fmt.Errorf("fleet exchange: %s: %w", op, err)
		}
		m, ok := merged[v.Key]
		if !ok {
			m = fleet.Verdict{Key: v.Key}
		}
		if v.HoldUntil.After(m.HoldUntil) {
			m.HoldUntil, m.HoldSpan = v.HoldUntil, v.HoldSpan
		}
		if v.StopUntil.After(m.StopUntil) {
			m.StopUntil, m.StopWhy = v.StopUntil, v.StopWhy
		}
		merged[v.Key] = m
	}
	if len(merged) == 0 {
		return nil
	}
	// In key order, so that the statement's work is reproducible.
	keys := make([]fleet.Key, 0, len(merged))
	for k := range merged {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareKeys)
	var (
		tenants, scopes, providers, models, keyIDs, stopWhys []string
		holds, stops                                         []pgtype.Timestamptz
		spans                                                []int64
	)
	for _, k := range keys {
		v := merged[k]
		tenants, scopes = append(tenants, k.Tenant), append(scopes, k.Scope.String())
		providers, models, keyIDs = append(providers, k.Provider), append(models, k.Model), append(keyIDs, k.KeyID)
		holds, stops = append(holds, dbTimeOrNull(v.HoldUntil)), append(stops, dbTimeOrNull(v.StopUntil))
		var span int64
		if !v.HoldUntil.IsZero() {
			span = v.HoldSpan.Milliseconds()
		}
		spans = append(spans, span)
		var why string
		if !v.StopUntil.IsZero() {
			why = cutWhy(v.StopWhy)
		}
		stopWhys = append(stopWhys, why)
	}
	return x.run(ctx, op, func(ctx context.Context) error {
		b := &pgx.Batch{}
		b.Queue(fleetLock)
		b.Queue(raiseRegistersSQL, tenants, scopes, providers, models, keyIDs, holds, spans, stops, stopWhys)
		return execBatch(ctx, x.pool, b)
	})
}

func compareKeys(a, b fleet.Key) int {
	if c := strings.Compare(a.Tenant, b.Tenant); c != 0 {
		return c
	}
	if a.Scope != b.Scope {
		return int(a.Scope) - int(b.Scope)
	}
	if c := strings.Compare(a.Provider, b.Provider); c != 0 {
		return c
	}
	if c := strings.Compare(a.Model, b.Model); c != 0 {
		return c
	}
	return strings.Compare(a.KeyID, b.KeyID)
}

// execBatch runs b (an implicit transaction: one Sync at its end) and
// returns its first error.
func execBatch(ctx context.Context, pool *pgxpool.Pool, b *pgx.Batch) error {
	br := pool.SendBatch(ctx, b)
	for range b.Len() {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return err
		}
	}
	return br.Close()
}

// The breaker's compare-and-set. $1..$5 are the key, $6..$9 the breaker's
// fields, $10 the base version. Each sets version to base+1, draws a seq and
// clears the probe slot, and notifies when it wins (a row comes out).
const (
	// From version 0: the row may not exist yet (or exist for its
	// registers alone, at version 0). Of concurrent inserts one inserts and
	// the others take the DO UPDATE, whose WHERE sees the winner's version.
	moveBreakerFromZeroSQL = `
WITH moved AS (
    INSERT INTO fleet_state AS s (tenant, scope, provider, model, key_id,
                                  breaker, open_until, open_period_ms, open_why, version, seq, updated_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::bigint + 1, nextval('fleet_seq'), now())
    ON CONFLICT (tenant, scope, provider, model, key_id) DO UPDATE SET
        breaker        = excluded.breaker,
        open_until     = excluded.open_until,
        open_period_ms = excluded.open_period_ms,
        open_why       = excluded.open_why,
        version        = excluded.version,
        probe_at       = NULL,
        probe_replica  = NULL,
        seq            = nextval('fleet_seq'),
        updated_at     = now()
    WHERE s.version = $10
    RETURNING 1
)
SELECT pg_notify('` + fleetChannel + `', 'breaker') FROM moved`
	// From a later version the row exists, or the CAS fails. A concurrent
	// UPDATE waits for the row and then re-checks its WHERE on the
	// winner's version.
	moveBreakerSQL = `
WITH moved AS (
    UPDATE fleet_state SET
        breaker        = $6,
        open_until     = $7,
        open_period_ms = $8,
        open_why       = $9,
        version        = $10::bigint + 1,
        probe_at       = NULL,
        probe_replica  = NULL,
        seq            = nextval('fleet_seq'),
        updated_at     = now()
    WHERE ` + keyWhere + ` AND version = $10
    RETURNING 1
)
SELECT pg_notify('` + fleetChannel + `', 'breaker') FROM moved`
)

// verdictColumns are what readVerdict scans.
const verdictColumns = `tenant, scope, provider, model, key_id, hold_until, hold_span_ms, stop_until, stop_why,
       breaker, open_until, open_period_ms, open_why, version, cleared_at, cleared, seq`

// MoveBreaker sets v's breaker fields (Breaker, OpenUntil, OpenPeriod,
// OpenWhy) and version base+1 when the shared version is still base, in one
// compare-and-set: of any number of concurrent calls with the same base,
// exactly one wins. It returns the verdict as it is after the call (the
// new one when won, the winner's otherwise; Verdict{Key: v.Key} when the
// row does not exist and base is not 0). The registers are left as they
// are; a transition clears the probe slot.
func (x *Exchange) MoveBreaker(ctx context.Context, v fleet.Verdict, base int64) (fleet.Verdict, bool, error) {
	const op = "move breaker"
	args, err := keyArgs(v.Key)
	if err == nil && base < 0 {
		err = dberr.Invalid("version", "must not be negative, got %d", base)
	}
	if err == nil && v.Breaker > fleet.HalfOpen {
		err = dberr.Invalid("breaker", "%d is not a breaker state", v.Breaker)
	}
	if err != nil {
		return fleet.Verdict{}, false, fmt.Errorf("fleet exchange: %s: %w", op, err)
	}
	args = append(args, v.Breaker.String(), dbTimeOrNull(v.OpenUntil), v.OpenPeriod.Milliseconds(), cutWhy(v.OpenWhy), base)
	stmt := moveBreakerSQL
	if base == 0 {
		stmt = moveBreakerFromZeroSQL
	}
	var (
		cur   fleet.Verdict
		won   bool
		found bool
	)
	err = x.run(ctx, op, func(ctx context.Context) error {
		b := &pgx.Batch{}
		b.Queue(fleetLock)
		b.Queue(stmt, args...)
		b.Queue(`SELECT `+verdictColumns+` FROM fleet_state WHERE `+keyWhere, args[:5]...)
		br := x.pool.SendBatch(ctx, b)
		defer func() { _ = br.Close() }()
		if _, err := br.Exec(); err != nil {
			return err
		}
		tag, err := br.Exec()
		if err != nil {
			return err
		}
		won = tag.RowsAffected() == 1
		rows, err := br.Query()
		if err != nil {
			return err
		}
		for rows.Next() {
			if cur, _, err = readVerdict(rows); err != nil {
				rows.Close()
				return err
			}
			found = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		return br.Close()
	})
	if err != nil {
		return fleet.Verdict{}, false, err
	}
	if !found {
		cur = fleet.Verdict{Key: v.Key}
	}
	return cur, won, nil
}

// ClaimProbe hands the probe slot of key's half-open breaker at version for
// the interval that starts at now to replica: true when the slot was free
// (never claimed since the transition, or last claimed at least interval
// before now). Concurrent claims of the same row queue on it, and the ones
// after the winner find its claim: exactly one gets true per interval. It
// draws no seq and notifies nobody: the slot is no verdict.
func (x *Exchange) ClaimProbe(ctx context.Context, key fleet.Key, version int64, now time.Time, interval time.Duration, replica string) (bool, error) {
	const op = "claim probe"
	args, err := keyArgs(key)
	if err != nil {
		return false, fmt.Errorf("fleet exchange: %s: %w", op, err)
	}
	args = append(args, version, now, now.Add(-interval), replica)
	var claimed bool
	err = x.run(ctx, op, func(ctx context.Context) error {
		tag, err := x.pool.Exec(ctx, `UPDATE fleet_state SET probe_at = $7, probe_replica = $9
			WHERE `+keyWhere+` AND version = $6 AND breaker = 'half_open'
			  AND (probe_at IS NULL OR probe_at <= $8)`, args...)
		claimed = tag.RowsAffected() == 1
		return err
	})
	return claimed && err == nil, err
}

// bucketCountsJSON is one bucket's counts in fleet_replicas.counts, a JSON
// array of these objects, with short keys and the zero values left out,
// since every replica rewrites its row every second:
//
//	{"s":"availability","t":"acme","p":"openai","m":"gpt-4o","k":"key-a",
//	 "f":3,"ok":40,"adm":12,"first":15,"retry":4,"probe_ok":1,"v":2,
//	 "c":["agent-1","agent-2"],"st":true,"rpm":500,"tpm":30000,"ftok":9000,"rtok":400}
//
// s is the scope's name; t, p, m and k the tenant, provider, model and key
// id; f, ok, adm, first, retry and asks the failures, successes, first
// attempts admitted, first attempts, retries and retries asked for; probe_ok and v the successes while
// half-open at version v; c the clients with counted failures; st whether
// streams report; rpm the provider's request limit; tpm its input-token
// limit, ftok and rtok the input tokens of first attempts and retries.
type bucketCountsJSON struct {
	Scope         string   `json:"s"`
	Tenant        string   `json:"t,omitempty"`
	Provider      string   `json:"p,omitempty"`
	Model         string   `json:"m,omitempty"`
	KeyID         string   `json:"k,omitempty"`
	Failures      int64    `json:"f,omitempty"`
	Successes     int64    `json:"ok,omitempty"`
	Admitted      int64    `json:"adm,omitempty"`
	FirstAttempts int64    `json:"first,omitempty"`
	Retries       int64    `json:"retry,omitempty"`
	Asks          int64    `json:"asks,omitempty"`
	ProbeOK       int64    `json:"probe_ok,omitempty"`
	Version       int64    `json:"v,omitempty"`
	Clients       []string `json:"c,omitempty"`
	Streamed      bool     `json:"st,omitempty"`
	RPM           int64    `json:"rpm,omitempty"`
	TPM           int64    `json:"tpm,omitempty"`
	FirstTokens   int64    `json:"ftok,omitempty"`
	RetryTokens   int64    `json:"rtok,omitempty"`
	Parked        int64    `json:"pk,omitempty"`
	RecentF       int64    `json:"rf,omitempty"`
	RecentOK      int64    `json:"rok,omitempty"`
	UsedTokens    int64    `json:"utok,omitempty"`
	UsedEstimates int64    `json:"uest,omitempty"`
	OTPM          int64    `json:"otpm,omitempty"`
	OutputTokens  int64    `json:"otok,omitempty"`
	OutputCalls   int64    `json:"ocalls,omitempty"`
}

// PublishCounts replaces rc.Replica's counts (all its buckets at once) and
// draws a new seq for its row. It notifies the others only when rc.Urgent:
// otherwise they read counts when they read anyway (every second). An empty Clients reads back as nil;
// At is kept to the microsecond.
func (x *Exchange) PublishCounts(ctx context.Context, rc fleet.ReplicaCounts) error {
	const op = "publish counts"
	if rc.Replica == "" {
		return fmt.Errorf("fleet exchange: %s: %w", op, dberr.Invalid("replica", "is required"))
	}
	buckets := make([]bucketCountsJSON, 0, len(rc.Buckets))
	for _, c := range rc.Buckets {
		if _, err := keyArgs(c.Key); err != nil {
			return fmt.Errorf("fleet exchange: %s: %w", op, err)
		}
		buckets = append(buckets, bucketCountsJSON{
			Scope: c.Key.Scope.String(), Tenant: c.Key.Tenant, Provider: c.Key.Provider, Model: c.Key.Model, KeyID: c.Key.KeyID,
			Failures: c.Failures, Successes: c.Successes, Admitted: c.Admitted, FirstAttempts: c.FirstAttempts,
			Retries: c.Retries, Asks: c.Asks, ProbeOK: c.ProbeOK, Version: c.Version, Clients: c.Clients, Streamed: c.Streamed,
			RPM: c.RequestsPerMinute, TPM: c.InputTokensPerMinute, FirstTokens: c.FirstAttemptTokens, RetryTokens: c.RetryTokens,
			Parked: c.Parked, RecentF: c.RecentFailures, RecentOK: c.RecentSuccesses,
			UsedTokens: c.UsedTokens, UsedEstimates: c.UsedEstimates,
			OTPM: c.OutputTokensPerMinute, OutputTokens: c.OutputTokens, OutputCalls: c.OutputCalls,
		})
	}
	counts, err := json.Marshal(buckets)
	if err != nil {
		return fmt.Errorf("fleet exchange: %s: %w", op, err)
	}
	return x.run(ctx, op, func(ctx context.Context) error {
		b := &pgx.Batch{}
		b.Queue(fleetLock)
		b.Queue(`INSERT INTO fleet_replicas (replica, at, seq, counts)
			VALUES ($1, $2, nextval('fleet_seq'), $3::jsonb)
			ON CONFLICT (replica) DO UPDATE SET at = excluded.at, seq = excluded.seq, counts = excluded.counts`,
			rc.Replica, rc.At, string(counts))
		if rc.Urgent {
			b.Queue(`SELECT pg_notify('` + fleetChannel + `', 'counts')`)
		}
		return execBatch(ctx, x.pool, b)
	})
}

// Read returns the verdicts with a seq above seq (all for 0) and the counts
// of the replicas other than replica with a seq above countsSeq (all for
// 0), each in seq order, and the highest seqs seen (the ones given when
// nothing is newer). Both queries go in one round trip.
func (x *Exchange) Read(ctx context.Context, replica string, seq, countsSeq int64) (fleet.Changes, error) {
	ch := fleet.Changes{Seq: seq, CountsSeq: countsSeq}
	err := x.run(ctx, "read", func(ctx context.Context) error {
		b := &pgx.Batch{}
		b.Queue(`SELECT `+verdictColumns+` FROM fleet_state WHERE seq > $1 ORDER BY seq`, seq)
		b.Queue(`SELECT replica, at, counts, seq FROM fleet_replicas
			WHERE replica <> $1 AND seq > $2 ORDER BY seq`, replica, countsSeq)
		br := x.pool.SendBatch(ctx, b)
		defer func() { _ = br.Close() }()
		rows, err := br.Query()
		if err != nil {
			return err
		}
		for rows.Next() {
			v, s, err := readVerdict(rows)
			if err != nil {
				rows.Close()
				return err
			}
			ch.Verdicts = append(ch.Verdicts, v)
			ch.Seq = max(ch.Seq, s)
		}
		if rows.Close(); rows.Err() != nil {
			return rows.Err()
		}
		if rows, err = br.Query(); err != nil {
			return err
		}
		for rows.Next() {
			rc, s, err := readCounts(rows)
			if err != nil {
				rows.Close()
				return err
			}
			ch.Counts = append(ch.Counts, rc)
			ch.CountsSeq = max(ch.CountsSeq, s)
		}
		if rows.Close(); rows.Err() != nil {
			return rows.Err()
		}
		return br.Close()
	})
	if err != nil {
		return fleet.Changes{}, err
	}
	return ch, nil
}

// readVerdict scans a row of verdictColumns.
func readVerdict(rows pgx.Rows) (fleet.Verdict, int64, error) {
	var (
		v                         fleet.Verdict
		scope, breaker            string
		hold, stop, open, cleared pgtype.Timestamptz
		spanMS, periodMS, version int64
		clearedBits               int16
		seq                       int64
	)
	if err := rows.Scan(&v.Key.Tenant, &scope, &v.Key.Provider, &v.Key.Model, &v.Key.KeyID,
		&hold, &spanMS, &stop, &v.StopWhy, &breaker, &open, &periodMS, &v.OpenWhy, &version, &cleared, &clearedBits, &seq); err != nil {
		return fleet.Verdict{}, 0, err
	}
	s, err := fleet.ParseScope(scope)
	if err != nil {
		return fleet.Verdict{}, 0, err
	}
	state, err := parseBreaker(breaker)
	if err != nil {
		return fleet.Verdict{}, 0, err
	}
	v.Key.Scope, v.Breaker, v.Version = s, state, version
	v.HoldUntil, v.HoldSpan = fleetTime(hold), time.Duration(spanMS)*time.Millisecond
	v.StopUntil = fleetTime(stop)
	v.OpenUntil, v.OpenPeriod = fleetTime(open), time.Duration(periodMS)*time.Millisecond
	v.ClearedAt, v.Cleared = fleetTime(cleared), fleet.ClearingOf(clearedBits)
	return v, seq, nil
}

func parseBreaker(name string) (fleet.BreakerState, error) {
	for _, s := range []fleet.BreakerState{fleet.Closed, fleet.Open, fleet.HalfOpen} {
		if s.String() == name {
			return s, nil
		}
	}
	return 0, fmt.Errorf("%q is not a breaker state (want closed, open or half_open)", name)
}

// readCounts scans a row of fleet_replicas (replica, at, counts, seq).
func readCounts(rows pgx.Rows) (fleet.ReplicaCounts, int64, error) {
	var (
		rc     fleet.ReplicaCounts
		at     time.Time
		counts []byte
		seq    int64
	)
	if err := rows.Scan(&rc.Replica, &at, &counts, &seq); err != nil {
		return fleet.ReplicaCounts{}, 0, err
	}
	rc.At = at.UTC()
	var buckets []bucketCountsJSON
	if err := json.Unmarshal(counts, &buckets); err != nil {
		return fleet.ReplicaCounts{}, 0, fmt.Errorf("counts of replica %q: %w", rc.Replica, err)
	}
	for _, c := range buckets {
		s, err := fleet.ParseScope(c.Scope)
		if err != nil {
			return fleet.ReplicaCounts{}, 0, fmt.Errorf("counts of replica %q: %w", rc.Replica, err)
		}
		rc.Buckets = append(rc.Buckets, fleet.Counts{
			Key:      fleet.Key{Scope: s, Tenant: c.Tenant, Provider: c.Provider, Model: c.Model, KeyID: c.KeyID},
			Failures: c.Failures, Successes: c.Successes, Admitted: c.Admitted, FirstAttempts: c.FirstAttempts,
			Retries: c.Retries, Asks: c.Asks, ProbeOK: c.ProbeOK, Version: c.Version, Clients: c.Clients, Streamed: c.Streamed,
			RequestsPerMinute: c.RPM, InputTokensPerMinute: c.TPM, FirstAttemptTokens: c.FirstTokens, RetryTokens: c.RetryTokens,
			Parked: c.Parked, RecentFailures: c.RecentF, RecentSuccesses: c.RecentOK,
			UsedTokens: c.UsedTokens, UsedEstimates: c.UsedEstimates,
			OutputTokensPerMinute: c.OTPM, OutputTokens: c.OutputTokens, OutputCalls: c.OutputCalls,
		})
	}
	return rc, seq, nil
}

// Sweep deletes what no replica needs any more: the verdicts whose hold and
// stop ended by now, whose breaker is closed and that nobody changed for
// idle (by PostgreSQL's clock, which stamps updated_at), and the counts of
// replicas that published nothing since now-idle (by the fleet's clock, like
// their At): replicas that went away. It returns how many rows it deleted.
// A swept verdict reads as new (version 0) the next time a replica writes
// it, so idle should be well above the breaker's window and any hold. Rare
// calls suffice (the Syncer's).
func (x *Exchange) Sweep(ctx context.Context, now time.Time, idle time.Duration) (int64, error) {
	var n int64
	err := x.run(ctx, "sweep", func(ctx context.Context) error {
		b := &pgx.Batch{}
		b.Queue(fleetLock) // the deletes lock rows, as the writers do: in the same order
		b.Queue(`DELETE FROM fleet_state
			WHERE (hold_until IS NULL OR hold_until <= $1)
			  AND (stop_until IS NULL OR stop_until <= $1)
			  AND breaker = 'closed'
			  AND updated_at < now() - $2::interval`, now, idle)
		b.Queue(`DELETE FROM fleet_replicas WHERE at < $1`, now.Add(-idle))
		br := x.pool.SendBatch(ctx, b)
		defer func() { _ = br.Close() }()
		for i := range b.Len() {
			tag, err := br.Exec()
			if err != nil {
				return err
			}
			if i > 0 {
				n += tag.RowsAffected()
			}
		}
		return br.Close()
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// Clear forgets every shared verdict and every replica's counts in the
// database at databaseURL: a fresh start for a simulation's run (policyd-sim
// runs its scenarios one after another on one database). Never on a
// database that serving replicas share: they would lose their open breakers
// and holds.
func Clear(ctx context.Context, databaseURL string) error {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return dberr.Translate(ctx, "clear fleet: connect", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	_, err = conn.Exec(ctx, `TRUNCATE fleet_state, fleet_replicas`)
	return dberr.Translate(ctx, "clear fleet", err)
}
