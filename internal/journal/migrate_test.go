package journal_test

import (
	"context"
	"slices"
	"sort"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/policyd/policyd/internal/journal"
	"github.com/policyd/policyd/internal/journal/journaltest"
)

// relations lists the journal's tables and views in the database.
func relations(t *testing.T, url string) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	rows, err := conn.Query(ctx, `SELECT table_name FROM information_schema.tables
		WHERE table_schema = 'public' AND table_name <> 'policyd_schema_version'`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	return names
}

// sequenceExists reports whether the database has sequence name.
func sequenceExists(t *testing.T, url, name string) bool {
	t.Helper()
	_, rows := journaltest.Query(t, url, `SELECT count(*) FROM pg_class WHERE relkind = 'S' AND relname = $1`, name)
	return rows[0][0] == "1"
}

var schema = []string{
	"error_reports", "fleet_events", "fleet_replicas", "fleet_state", "incident_attempts", "incident_events",
	"incident_spans", "incidents", "journal_contexts", "journal_failed_contexts",
	"journal_failures_per_hour", "journal_fleet_breaker_periods", "journal_fleet_first_failures",
	"journal_fleet_saved_attempts", "journal_retry_success_rate", "journal_unrecognized_failures", "journal_wait_per_context",
	"journal_wait_per_provider", "retry_attempts", "retry_contexts",
}

// fleetRelations are what migrations 4 and 6 add: the fleet's events, then
// the state the replicas share.
var fleetRelations = append([]string{"fleet_events", "journal_fleet_breaker_periods", "journal_fleet_first_failures",
	"journal_fleet_saved_attempts", "fleet_replicas", "fleet_state"}, incidentRelations...)

// incidentRelations are what migration 11 adds: the incidents' views.
var incidentRelations = []string{"incident_attempts", "incident_events", "incident_spans", "incidents"}

// without returns schema without the relations named.
func without(names ...string) []string {
	return slices.DeleteFunc(slices.Clone(schema), func(n string) bool { return slices.Contains(names, n) })
}

func TestMigrateUpDownUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := journaltest.EmptyDatabaseURL(t)
	steps := []struct {
		name    string
		migrate func() error
		want    []string
	}{
		{"up on an empty database", func() error { return journal.Migrate(ctx, url) }, schema},
		{"up again changes nothing", func() error { return journal.Migrate(ctx, url) }, schema},
		{"down to the twelfth schema", func() error { return journal.MigrateTo(ctx, url, 12) }, schema},
		{"up from the twelfth schema", func() error { return journal.Migrate(ctx, url) }, schema},
		{"down to the tenth schema", func() error { return journal.MigrateTo(ctx, url, 10) }, without(incidentRelations...)},
		{"up from the tenth schema", func() error { return journal.Migrate(ctx, url) }, schema},
		{"down to the fifth schema", func() error { return journal.MigrateTo(ctx, url, 5) },
			without(append([]string{"fleet_replicas", "fleet_state"}, incidentRelations...)...)},
		{"up from the fifth schema", func() error { return journal.Migrate(ctx, url) }, schema},
		{"down to the third schema", func() error { return journal.MigrateTo(ctx, url, 3) }, without(fleetRelations...)},
		{"up from the third schema", func() error { return journal.Migrate(ctx, url) }, schema},
		{"down to the second schema", func() error { return journal.MigrateTo(ctx, url, 2) },
			without(append(fleetRelations, "journal_unrecognized_failures")...)},
		{"up from the second schema", func() error { return journal.Migrate(ctx, url) }, schema},
		{"down to the first schema", func() error { return journal.MigrateTo(ctx, url, 1) },
			without(append(fleetRelations, "journal_contexts", "journal_unrecognized_failures")...)},
		{"up from the first schema", func() error { return journal.Migrate(ctx, url) }, schema},
		{"down to nothing", func() error { return journal.MigrateTo(ctx, url, 0) }, nil},
		{"up again", func() error { return journal.Migrate(ctx, url) }, schema},
	}
	for _, step := range steps {
		if err := step.migrate(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if got := relations(t, url); !slices.Equal(got, step.want) {
			t.Fatalf("%s: relations = %v, want %v", step.name, got, step.want)
		}
		// Migration 6's sequence comes and goes with its tables.
		if got, want := sequenceExists(t, url, "fleet_seq"), slices.Contains(step.want, "fleet_state"); got != want {
			t.Fatalf("%s: sequence fleet_seq exists = %v, want %v", step.name, got, want)
		}
	}
	// The migrated schema works.
	s := openStoreAt(t, url)
	c := begin(t, s, journal.Context{Tenant: "t"})
	record(t, s, "t", journal.Attempt{ContextID: c.ID, Attempt: 1})
}

func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := journaltest.EmptyDatabaseURL(t)
	const replicas = 4
	var wg sync.WaitGroup
	errs := make([]error, replicas)
	for i := range replicas {
		wg.Go(func() { errs[i] = journal.Migrate(ctx, url) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("replica %d: Migrate: %v", i, err)
		}
	}
	if got := relations(t, url); !slices.Equal(got, schema) {
		t.Fatalf("relations = %v, want %v", got, schema)
	}
}

func TestMigrateBadURL(t *testing.T) {
	t.Parallel()
	err := journal.Migrate(context.Background(), "postgres://%zz")
	wantField(t, err, "database_url")
	// Nothing listens on port 1.
	err = journal.Migrate(context.Background(), "postgres://postgres@127.0.0.1:1/x?sslmode=disable&connect_timeout=2")
	wantErr(t, err, journal.ErrUnavailable)
}

// TestMigrationDropsRowChecks: migration 7 leaves the hot tables with only
// the context's state checks (the store enforces the bounds before a row is
// queued), and going down puts the 24 row checks back.
func TestMigrationDropsRowChecks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := journaltest.EmptyDatabaseURL(t)
	checks := func() (attempts, contexts string) {
		_, rows := journaltest.Query(t, url, `
			SELECT count(*) FILTER (WHERE conrelid = 'retry_attempts'::regclass),
			       count(*) FILTER (WHERE conrelid = 'retry_contexts'::regclass)
			FROM pg_constraint WHERE contype = 'c'`)
		return rows[0][0], rows[0][1]
	}
	for _, step := range []struct {
		name                   string
		migrate                func() error
		wantAttempts, wantCtxs string
	}{
		{"up", func() error { return journal.Migrate(ctx, url) }, "0", "2"},
		{"down to the sixth schema", func() error { return journal.MigrateTo(ctx, url, 6) }, "17", "9"},
		{"up again", func() error { return journal.Migrate(ctx, url) }, "0", "2"},
	} {
		if err := step.migrate(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if a, c := checks(); a != step.wantAttempts || c != step.wantCtxs {
			t.Errorf("%s: CHECK constraints on retry_attempts %s, retry_contexts %s; want %s and %s",
				step.name, a, c, step.wantAttempts, step.wantCtxs)
		}
	}
}

// TestMigrationIncidentGateColumns: migration 12 appends parked and
// gate_fell_back to incident_spans and incidents, and going down leaves the
// three incident views as migration 11 made them.
func TestMigrationIncidentGateColumns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := journaltest.EmptyDatabaseURL(t)
	views := []string{"incident_spans", "incident_attempts", "incidents"}
	shape := func() (columns map[string][]string, defs map[string]string) {
		columns, defs = map[string][]string{}, map[string]string{}
		for _, v := range views {
			_, rows := journaltest.Query(t, url, `SELECT column_name FROM information_schema.columns
				WHERE table_schema = 'public' AND table_name = $1 ORDER BY ordinal_position`, v)
			for _, r := range rows {
				columns[v] = append(columns[v], r[0])
			}
			_, rows = journaltest.Query(t, url, `SELECT pg_get_viewdef($1::regclass)`, v)
			defs[v] = rows[0][0]
		}
		return columns, defs
	}
	if err := journal.MigrateTo(ctx, url, 11); err != nil {
		t.Fatal(err)
	}
	cols11, defs11 := shape()
	if err := journal.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	cols12, _ := shape()
	for _, v := range []string{"incident_spans", "incidents"} {
		want := append(slices.Clone(cols11[v]), "parked", "gate_fell_back")
		if !slices.Equal(cols12[v], want) {
			t.Errorf("%s columns %v, want 11's with parked and gate_fell_back appended", v, cols12[v])
		}
	}
	if !slices.Equal(cols12["incident_attempts"], cols11["incident_attempts"]) {
		t.Errorf("incident_attempts columns %v, want 11's %v", cols12["incident_attempts"], cols11["incident_attempts"])
	}
	if err := journal.MigrateTo(ctx, url, 11); err != nil {
		t.Fatal(err)
	}
	cols, defs := shape()
	for _, v := range views {
		if !slices.Equal(cols[v], cols11[v]) || defs[v] != defs11[v] {
			t.Errorf("%s after going down to 11: columns %v, definition\n%s\nwant 11's:\n%v\n%s", v, cols[v], defs[v], cols11[v], defs11[v])
		}
	}
}
