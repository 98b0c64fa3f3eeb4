// Package dberr is the storage packages' errors: the sentinels callers test
// with errors.Is (ErrNotFound, ErrUnavailable, ErrInvalid with an
// *InvalidError naming the field), and Translate, the one place where
// errors from pgx and PostgreSQL become them. The journal and the fleet's
// PostgreSQL exchange share it, so both report an outage, bad input or a
// missing row the same way; only storage packages import it (and pgx).
package dberr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The storage errors. Every error a storage call returns either wraps one
// of these (test with errors.Is), is the caller's context error, or is an
// unexpected failure that callers should log and report as internal.
var (
	// ErrNotFound is a row that does not exist (for the tenant asking).
	ErrNotFound = errors.New("not found")
	// ErrUnavailable is a database that is down, unreachable or too slow to
	// answer within the store's timeout, or a closed store. The call may
	// succeed later.
	ErrUnavailable = errors.New("journal database unavailable")
	// ErrInvalid is bad input. The error is an *InvalidError naming the field.
	ErrInvalid = errors.New("invalid argument")
	// ErrOpTimeout is the cause to give a context that runs out of a
	// store's own time budget (context.WithTimeoutCause), so that Translate
	// tells it from the caller's deadline: the first is the database's
	// fault (ErrUnavailable), the second the caller's.
	ErrOpTimeout = errors.New("journal database did not answer in time")
)

// InvalidError is bad input to a storage call. It matches ErrInvalid with
// errors.Is, and names the field (in the API's snake_case, e.g.
// "context_id", "labels", "page_token") so that the server can report it.
type InvalidError struct {
	Field       string
	Description string
}

// Error returns "field: description", e.g. "context_id: must be a UUID".
func (e *InvalidError) Error() string { return e.Field + ": " + e.Description }

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

// Invalid returns an *InvalidError naming field, its description formatted.
func Invalid(field, format string, args ...any) *InvalidError {
	return &InvalidError{Field: field, Description: fmt.Sprintf(format, args...)}
}

// Translate turns an error from pgx or PostgreSQL into the storage errors.
// op says what was being done ("record attempts"); ctx is the context the
// operation ran under, whose cause tells the store's own timeout
// (ErrOpTimeout) from the caller's deadline. The result wraps the original
// error so that logs keep the detail.
func Translate(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrInvalid), errors.Is(err, ErrUnavailable):
		return fmt.Errorf("%s: %w", op, err)
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%s: %w", op, ErrNotFound)
	case ctx != nil && errors.Is(context.Cause(ctx), ErrOpTimeout):
		return fmt.Errorf("%s: %w: %w", op, ErrUnavailable, ErrOpTimeout)
	case ctx != nil && ctx.Err() != nil:
		// The caller gave up: its own error, not the database's.
		return fmt.Errorf("%s: %w", op, ctx.Err())
	}
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		switch {
		case pgErr.Code == "23503": // foreign_key_violation: the parent row went away (pruned)
			return fmt.Errorf("%s: %w: %w", op, ErrNotFound, err)
		case strings.HasPrefix(pgErr.Code, "22"), // data exception: too long, bad UUID, bad JSON
			pgErr.Code == "23502", pgErr.Code == "23514": // not_null, check violation
			return fmt.Errorf("%s: %w: %w", op, &InvalidError{Field: fieldOf(pgErr), Description: pgErr.Message}, err)
		case strings.HasPrefix(pgErr.Code, "08"), // connection exception
			strings.HasPrefix(pgErr.Code, "53"),                                 // insufficient resources (too many connections, disk full)
			pgErr.Code == "57P01", pgErr.Code == "57P02", pgErr.Code == "57P03", // shutting down, starting up
			pgErr.Code == "57014",                        // query_canceled: statement_timeout
			pgErr.Code == "40P01", pgErr.Code == "40001": // deadlock, serialization: retried, then give up
			return fmt.Errorf("%s: %w: %w", op, ErrUnavailable, err)
		}
		return fmt.Errorf("%s: %w", op, err)
	}
	if isConnectionError(err) {
		return fmt.Errorf("%s: %w: %w", op, ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// isConnectionError is an error on the way to or from the server, rather
// than one the server reported.
func isConnectionError(err error) bool {
	if _, ok := errors.AsType[*pgconn.ConnectError](err); ok {
		return true
	}
	if _, ok := errors.AsType[net.Error](err); ok {
		return true
	}
	return pgconn.Timeout(err) || pgconn.SafeToRetry(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed) ||
		strings.Contains(err.Error(), "closed pool") || strings.Contains(err.Error(), "conn closed")
}

// IsUniqueViolation reports whether err is PostgreSQL's unique_violation,
// e.g. an attempt recorded twice.
func IsUniqueViolation(err error) bool {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	return ok && pgErr.Code == "23505"
}

// IsRetryableConflict is a transaction that lost a race with another one
// (deadlock or serialization failure) and can simply run again.
func IsRetryableConflict(err error) bool {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	return ok && (pgErr.Code == "40P01" || pgErr.Code == "40001")
}

// fieldOf names the column a data error was about, when PostgreSQL said.
func fieldOf(pgErr *pgconn.PgError) string {
	if pgErr.ColumnName != "" {
		return pgErr.ColumnName
	}
	if name, ok := strings.CutSuffix(pgErr.ConstraintName, "_check"); ok {
		// e.g. retry_attempts_message_check → message
		if i := strings.IndexByte(name, '_'); i >= 0 {
			if j := strings.IndexByte(name[i+1:], '_'); j >= 0 {
				return name[i+1+j+1:]
			}
		}
	}
	return "request"
}
