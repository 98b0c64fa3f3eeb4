// Package pgnotify keeps one PostgreSQL session LISTENing on a channel and
// says when a notification arrives and when it listens again after an
// outage: connect, LISTEN, wait (pinging while idle, so that a connection
// that died silently is found), and on failure back off and start over.
//
// A notification sent while the session was away is lost, so every
// (re)connection is reported as well: a caller treats "ready" like a
// notification and reads what it may have missed. The session must be a
// real one: a pooler in transaction mode (PgBouncer's transaction pooling)
// drops LISTEN between transactions.
package pgnotify

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/policyd/policyd/internal/dberr"
)

// The notifier's defaults.
const (
	DefaultPingEvery = 5 * time.Second
	DefaultTimeout   = 5 * time.Second
	minBackoff       = 100 * time.Millisecond
	maxBackoff       = 5 * time.Second
)

// Notifier listens on one channel. Its fields are set before Run.
type Notifier struct {
	// ConnConfig is the listening session's connection (a copy is used).
	ConnConfig *pgx.ConnConfig
	// Channel is the channel LISTENed on (an SQL identifier).
	Channel string
	// Name prefixes the log lines (e.g. "fleet exchange").
	Name string
	// Logger gets the outages (Warn once, then Debug) and recoveries (Info).
	// Default slog.Default().
	Logger *slog.Logger
	// Timeout bounds connecting, LISTEN and each ping. Default 5s.
	Timeout time.Duration
	// PingEvery is how long an idle wait lasts before a ping. Default 5s.
	PingEvery time.Duration
	// Ignore, when set, drops the notifications of the backends it names
	// (e.g. a process's own pool: its own changes need no wake).
	Ignore func(pid uint32) bool
	// Notify is called on every notification not ignored and after every
	// (re)connection. It must not block.
	Notify func()
}

// Run listens until ctx ends, reconnecting with a backoff (100ms doubling
// to 5s) whenever the session fails.
func (n *Notifier) Run(ctx context.Context) {
	logger := n.Logger
	if logger == nil {
		logger = slog.Default()
	}
	backoff := minBackoff
	failing := false // since the last successful LISTEN
	for {
		conn, err := n.connect(ctx)
		if err == nil {
			if failing {
				logger.Info(n.Name + ": listener connected again")
			}
			failing, backoff = false, minBackoff
			n.Notify() // a notification may have been missed while away
			err = n.wait(ctx, conn)
			closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = conn.Close(closeCtx)
			cancel()
		}
		if ctx.Err() != nil {
			return
		}
		if !failing {
			logger.Warn(n.Name+": listener lost the database; reconnecting", "error", err)
			failing = true
		} else {
			logger.Debug(n.Name+": listener still cannot reach the database", "error", err, "retry_in", backoff)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

func (n *Notifier) timeout() time.Duration {
	if n.Timeout > 0 {
		return n.Timeout
	}
	return DefaultTimeout
}

// connect opens the session and LISTENs.
func (n *Notifier) connect(ctx context.Context) (*pgx.Conn, error) {
	cctx, cancel := context.WithTimeoutCause(ctx, n.timeout(), dberr.ErrOpTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, n.ConnConfig.Copy())
	if err != nil {
		return nil, dberr.Translate(cctx, n.Name+": listener: connect", err)
	}
	if _, err := conn.Exec(cctx, "LISTEN "+n.Channel); err != nil {
		_ = conn.Close(context.WithoutCancel(cctx))
		return nil, dberr.Translate(cctx, n.Name+": listener: listen", err)
	}
	return conn, nil
}

// wait waits for notifications on conn, pinging it when idle, until the
// connection fails or ctx ends.
func (n *Notifier) wait(ctx context.Context, conn *pgx.Conn) error {
	pingEvery := n.PingEvery
	if pingEvery <= 0 {
		pingEvery = DefaultPingEvery
	}
	for {
		wctx, cancel := context.WithTimeout(ctx, pingEvery)
		note, err := conn.WaitForNotification(wctx)
		idle := wctx.Err() != nil
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err == nil:
			if note != nil && (n.Ignore == nil || !n.Ignore(note.PID)) {
				n.Notify()
			}
			continue
		case !idle || conn.IsClosed():
			return dberr.Translate(ctx, n.Name+": listener: wait", err)
		}
		// Idle: the wait's deadline interrupted the read, which leaves the
		// connection usable. A ping finds a connection that died silently.
		pctx, cancel := context.WithTimeoutCause(ctx, n.timeout(), dberr.ErrOpTimeout)
		err = conn.Ping(pctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return dberr.Translate(pctx, n.Name+": listener: ping", err)
		}
	}
}
