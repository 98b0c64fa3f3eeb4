package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestIncidentsCommandInput: bad input is a usage error (exit status 2)
// naming the flag or argument, before any call to a daemon.
func TestIncidentsCommandInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"since", []string{"--since", "yesterday"}, "incidents: --since: want a duration ago (24h) or an RFC 3339 time"},
		{"negative since", []string{"--since", "-1h"}, "incidents: --since: a duration ago must not be negative"},
		{"limit", []string{"--limit", "-1"}, "incidents: --limit must be ≥ 0"},
		{"id", []string{"abc"}, `incidents: want an incident id (a positive number, as the list shows it), got "abc"`},
		{"zero id", []string{"0"}, `incidents: want an incident id`},
		{"two ids", []string{"1", "2"}, "incidents: want at most one argument (an incident id), got 2"},
		{"unknown flag", []string{"--opened"}, "incidents: flag provided but not defined: --opened"},
		{"tls-ca", []string{"--tls-ca", "/nonexistent/ca.pem"}, "incidents: --tls-ca:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			err := run(context.Background(), append([]string{"incidents"}, tt.args...), strings.NewReader(""), &out, &out)
			if exitCode(err) != 2 || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v (exit %d), want a usage error containing %q", err, exitCode(err), tt.want)
			}
		})
	}
}

func TestParseSince(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"24h":                  now.Add(-24 * time.Hour),
		"90m":                  now.Add(-90 * time.Minute),
		"2026-11-27T10:00:00Z": time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC),
	} {
		if got, err := parseSince(in, now); err != nil || !got.Equal(want) {
			t.Errorf("parseSince(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
}
