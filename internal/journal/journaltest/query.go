package journaltest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Query runs sql on the database at databaseURL and returns its column
// names and its rows, each value formatted with %v (NULL as "NULL"). Tests
// outside the journal package use it to check what is in the tables
// without importing pgx themselves.
func Query(t testing.TB, databaseURL, sql string, args ...any) (columns []string, rows [][]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		t.Fatalf("journaltest.Query: connect: %v", err)
	}
	defer func() { _ = conn.Close(ctx) }()
	rs, err := conn.Query(ctx, sql, args...)
	if err != nil {
		t.Fatalf("journaltest.Query: %v\n%s", err, sql)
	}
	defer rs.Close()
	for _, fd := range rs.FieldDescriptions() {
		columns = append(columns, fd.Name)
	}
	for rs.Next() {
		values, err := rs.Values()
		if err != nil {
			t.Fatalf("journaltest.Query: %v\n%s", err, sql)
		}
		row := make([]string, len(values))
		for i, v := range values {
			if v == nil {
				row[i] = "NULL"
			} else {
				row[i] = fmt.Sprint(v)
			}
		}
		rows = append(rows, row)
	}
	if err := rs.Err(); err != nil {
		t.Fatalf("journaltest.Query: %v\n%s", err, sql)
	}
	return columns, rows
}
