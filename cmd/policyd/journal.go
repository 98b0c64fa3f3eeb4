package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/policyd/policyd/internal/journal"
)

// openJournal migrates the database (tern holds an advisory lock, so
// replicas may start together) and opens the journal store.
func openJournal(ctx context.Context, databaseURL string, logger *slog.Logger, opts ...journal.Option) (*journal.Store, error) {
	if err := journal.Migrate(ctx, databaseURL); err != nil {
		return nil, fmt.Errorf("migrate journal at %s: %w", redactURL(databaseURL), err)
	}
	store, err := journal.Open(ctx, databaseURL, append([]journal.Option{journal.WithLogger(logger)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("open journal at %s: %w", redactURL(databaseURL), err)
	}
	logger.Info("journal on", "database", redactURL(databaseURL))
	return store, nil
}

// redactURL hides a password in a database URL for logs and errors.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

const migrateUsage = `Usage: policyd migrate [--database-url URL]

Applies the journal's schema migrations to the database (what
'policyd serve --database-url' also does at start-up) and exits.
`

func migrateCmd(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("migrate", migrateUsage)
	databaseURL := fs.String("database-url", os.Getenv("DATABASE_URL"), "PostgreSQL `url` of the journal (env DATABASE_URL)")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if *databaseURL == "" {
		return usageErrorf("migrate: --database-url (or DATABASE_URL) is required")
	}
	if err := journal.Migrate(ctx, *databaseURL); err != nil {
		return fmt.Errorf("migrate: %s: %w", redactURL(*databaseURL), err)
	}
	fmt.Fprintf(stdout, "migrate: %s is up to date\n", redactURL(*databaseURL))
	return nil
}

const pruneUsage = `Usage: policyd prune --older-than AGE [--database-url URL]

Deletes the RetryContexts (with their attempts and error reports) started
more than AGE ago, so the journal does not grow without bound; a context
still in progress after AGE was left by an agent that died, and goes too.
AGE is a Go duration or a number of days: 720h, 30d. Run it from cron or a
Kubernetes CronJob.
`

func pruneCmd(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("prune", pruneUsage)
	databaseURL := fs.String("database-url", os.Getenv("DATABASE_URL"), "PostgreSQL `url` of the journal (env DATABASE_URL)")
	olderThan := fs.String("older-than", "", "delete the contexts started more than this `age` ago, e.g. 30d or 720h")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	age, err := parseAge(*olderThan)
	if err != nil {
		return usageErrorf("prune: --older-than: %v", err)
	}
	if *databaseURL == "" {
		return usageErrorf("prune: --database-url (or DATABASE_URL) is required")
	}
	store, err := journal.Open(ctx, *databaseURL)
	if err != nil {
		return fmt.Errorf("prune: %s: %w", redactURL(*databaseURL), err)
	}
	defer store.Close()
	n, err := store.Prune(ctx, time.Now().Add(-age))
	if err != nil {
		return fmt.Errorf("prune: %w", err)
	}
	fmt.Fprintf(stdout, "prune: deleted %d contexts started before %s\n", n, time.Now().Add(-age).UTC().Format(time.RFC3339))
	return nil
}

// parseAge reads "30d" or a Go duration such as "720h"; it must be positive.
func parseAge(s string) (time.Duration, error) {
	if s == "" {
		return 0, fmt.Errorf("required, e.g. 30d")
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("%q is not a positive number of days", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q is not a positive duration (want e.g. 30d or 720h)", s)
	}
	return d, nil
}
