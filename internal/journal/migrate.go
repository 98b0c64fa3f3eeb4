package journal

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"

	"github.com/policyd/policyd/migrations"
)

// versionTable is where tern keeps the schema version. It is named for
// policyd so that the journal can share a database with other applications
// that also use tern.
const versionTable = "public.policyd_schema_version"

// Migrate brings the database at databaseURL up to the newest schema in
// package migrations. It is safe to run from several replicas at once:
// tern holds a PostgreSQL advisory lock while it migrates, so one replica
// migrates and the others find the work done.
func Migrate(ctx context.Context, databaseURL string) error {
	return migrateTo(ctx, databaseURL, -1)
}

// migrateTo migrates to version target; -1 means the newest.
func migrateTo(ctx context.Context, databaseURL string, target int32) error {
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return fmt.Errorf("migrate journal: %w", invalid("database_url", "%v", err))
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return translate(ctx, "migrate journal: connect", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	m, err := migrate.NewMigrator(ctx, conn, versionTable)
	if err != nil {
		return translate(ctx, "migrate journal", err)
	}
	if err := m.LoadMigrations(migrations.FS); err != nil {
		return fmt.Errorf("migrate journal: load migrations: %w", err)
	}
	if target < 0 {
		target = int32(len(m.Migrations))
	}
	if err := m.MigrateTo(ctx, target); err != nil {
		return translate(ctx, "migrate journal", err)
	}
	return nil
}
