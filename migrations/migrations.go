// Package migrations holds the journal's database schema as numbered SQL
// files in jackc/tern v2 format (NNN_name.sql, with the down migration after
// a "---- create above / drop below ----" line). The schema changes only by
// adding a file here; package internal/journal applies them.
package migrations

import "embed"

// FS holds every migration file, embedded so that the binary migrates its
// database without the source tree at hand.
//
//go:embed *.sql
var FS embed.FS
