package journal

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Page sizes of ListContexts.
const (
	// DefaultPageSize is the page size when Filter.PageSize is 0: a screen's
	// worth.
	DefaultPageSize = 50
	// MaxPageSize bounds a page (larger sizes are cut to it), so that one
	// answer stays well under gRPC's default 4 MiB message limit.
	MaxPageSize = 500
)

// Filter selects the contexts ListContexts returns; every field is
// optional (its zero value does not filter).
type Filter struct {
	// Outcome keeps contexts with this outcome.
	Outcome Outcome
	// Provider keeps contexts of this provider (exact match).
	Provider string
	// FailureType keeps contexts with at least one attempt of this type
	// (spelled as in Attempt.FailureType; "FAILURE_TYPE_" prefix allowed).
	FailureType string
	// From and To keep contexts started in [From, To).
	From, To time.Time
	// PageSize is the number of contexts per page: 0 means DefaultPageSize,
	// more than MaxPageSize means MaxPageSize.
	PageSize int
	// PageToken continues a listing: the nextPageToken of the previous call
	// with the same filter. Empty starts from the newest context.
	PageToken string
}

// ListContexts lists the tenant's contexts that match f, newest first (by
// start, then id), a page at a time. nextPageToken is empty on the last
// page. Pages are keyset-paginated, so a context begun while paging does not
// shift the pages that follow. A PageToken that did not come from
// ListContexts is ErrInvalid naming "page_token".
func (s *Store) ListContexts(ctx context.Context, tenant string, f Filter) ([]Context, string, error) {
	size := f.PageSize
	switch {
	case size < 0:
		return nil, "", fmt.Errorf("list contexts: %w", invalid("page_size", "must not be negative, got %d", size))
	case size == 0:
		size = DefaultPageSize
	case size > MaxPageSize:
		size = MaxPageSize
	}
	if f.Outcome != "" && !f.Outcome.valid() {
		return nil, "", fmt.Errorf("list contexts: %w", invalid("outcome", "must be empty, %s, %s, %s or %s, got %q",
			OutcomeInProgress, OutcomeResolved, OutcomeFailed, OutcomeAbandoned, clip(string(f.Outcome), 64)))
	}
	if !f.From.IsZero() && !f.To.IsZero() && !f.From.Before(f.To) {
		return nil, "", fmt.Errorf("list contexts: %w", invalid("started_before", "must be after started_after"))
	}

	where := []string{"c.tenant = $1"}
	args := []any{tenant}
	add := func(cond string, arg any) {
		args = append(args, arg)
		where = append(where, strings.ReplaceAll(cond, "$?", "$"+strconv.Itoa(len(args))))
	}
	if f.Outcome != "" {
		add("c.outcome = $?", string(f.Outcome))
	}
	if f.Provider != "" {
		add("c.provider = $?", f.Provider)
	}
	if f.FailureType != "" {
		add("EXISTS (SELECT 1 FROM retry_attempts a WHERE a.context_id = c.id AND a.failure_type = $?)",
			normalizeFailureType(f.FailureType))
	}
	if !f.From.IsZero() {
		add("c.started_at >= $?", f.From)
	}
	if !f.To.IsZero() {
		add("c.started_at < $?", f.To)
	}
	if f.PageToken != "" {
		at, id, err := decodePageToken(f.PageToken)
		if err != nil {
			return nil, "", fmt.Errorf("list contexts: %w", err)
		}
		args = append(args, at, id)
		where = append(where, fmt.Sprintf("(c.started_at, c.id) < ($%d, $%d::uuid)", len(args)-1, len(args)))
	}
	args = append(args, size+1)
	sql := `SELECT ` + contextColumns + ` FROM journal_contexts c
		WHERE ` + strings.Join(where, " AND ") + `
		ORDER BY c.started_at DESC, c.id DESC
		LIMIT $` + strconv.Itoa(len(args))

	var contexts []Context
	err := s.run(ctx, "list contexts", func(ctx context.Context) error {
		rows, err := s.pool.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		contexts, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Context, error) { return scanContext(r) })
		return err
	})
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(contexts) > size {
		contexts = contexts[:size]
		last := contexts[size-1]
		next = encodePageToken(last.StartedAt, last.ID)
	}
	if contexts == nil {
		contexts = []Context{}
	}
	return contexts, next, nil
}

// A page token is the keyset of the last context of a page: its start in
// Unix microseconds and its id, base64url-encoded so that clients treat it
// as opaque.
const pageTokenVersion = "v1"

func encodePageToken(startedAt time.Time, id string) string {
	raw := pageTokenVersion + "." + strconv.FormatInt(startedAt.UnixMicro(), 10) + "." + id
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

func decodePageToken(token string) (time.Time, string, error) {
	bad := invalid("page_token", "is not a token from a previous ListContexts call")
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return time.Time{}, "", bad
	}
	parts := strings.Split(string(raw), ".")
	if len(parts) != 3 || parts[0] != pageTokenVersion {
		return time.Time{}, "", bad
	}
	micros, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return time.Time{}, "", bad
	}
	id, err := uuid.Parse(parts[2])
	if err != nil {
		return time.Time{}, "", bad
	}
	return time.UnixMicro(micros).UTC(), id.String(), nil
}
