package journal

import (
	"context"

	"github.com/policyd/policyd/internal/dberr"
)

// The store's errors: the storage errors of package dberr, under the
// journal's names. Every error a Store method returns either wraps one of
// these (test with errors.Is), is the caller's context error, or is an
// unexpected failure that callers should log and report as internal.
var (
	// ErrNotFound is a context (or error report) that does not exist for the
	// tenant. A context that exists under another tenant is also not found,
	// so that one tenant cannot learn about another's ids.
	ErrNotFound = dberr.ErrNotFound
	// ErrUnavailable is a database that is down, unreachable or too slow to
	// answer within the store's timeout, or a closed store. The call may
	// succeed later: every write is idempotent, so it can simply be repeated.
	ErrUnavailable = dberr.ErrUnavailable
	// ErrInvalid is bad input. The error is an *InvalidError naming the field.
	ErrInvalid = dberr.ErrInvalid
)

// InvalidError is bad input to a Store method: it matches ErrInvalid with
// errors.Is and names the field (see dberr.InvalidError).
type InvalidError = dberr.InvalidError

func invalid(field, format string, args ...any) *InvalidError {
	return dberr.Invalid(field, format, args...)
}

// errOpTimeout is the cause of a context that ran out of the store's own
// time budget (WithTimeout), as opposed to the caller's deadline.
var errOpTimeout = dberr.ErrOpTimeout

// translate turns errors from pgx and PostgreSQL into the store's errors
// (dberr.Translate, shared with the fleet's exchange).
func translate(ctx context.Context, op string, err error) error {
	return dberr.Translate(ctx, op, err)
}

var (
	isUniqueViolation   = dberr.IsUniqueViolation
	isRetryableConflict = dberr.IsRetryableConflict
)
