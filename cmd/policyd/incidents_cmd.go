package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

const incidentsUsage = `Usage: policyd incidents [flags] [--open] [--since S] [--provider P] [--model M] [--bucket B]
       policyd incidents [flags] ID

Shows a running daemon's incidents (FleetService.ListIncidents and
GetIncident), as JSON: each is one bucket's trouble from its first failure
to its recovery, read back from the journal (docs/postmortem.md). Without
ID it lists the caller's incidents, newest first, at most --limit of them;
with ID it shows that incident with its timeline: its fleet events and its
activity over time. The daemon needs a journal (serve --database-url).
`

// defaultIncidentsLimit: a screen of recent incidents, not the whole history.
const defaultIncidentsLimit = 50

func incidentsCmd(ctx context.Context, args []string, now time.Time, stdout io.Writer) error {
	fs := newFlagSet("incidents", incidentsUsage)
	ff := defineFleetFlags(fs)
	open := fs.Bool("open", false, "only the incidents still in trouble")
	since := fs.String("since", "", "only those in trouble since this `time`: a duration ago (24h) or an RFC 3339 time")
	provider := fs.String("provider", "", "only this `provider`'s incidents")
	model := fs.String("model", "", "only this `model`'s incidents")
	bucket := fs.String("bucket", "", "only this `bucket`'s incidents, e.g. availability:openai/gpt-4o")
	limit := fs.Int("limit", defaultIncidentsLimit, "list at most this many `incidents`, newest first; 0: every one")
	if err := parseFlagsArgs(fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() > 1 {
		return usageErrorf("incidents: want at most one argument (an incident id), got %d; see 'policyd incidents --help'", fs.NArg())
	}
	if *limit < 0 {
		return usageErrorf("incidents: --limit must be ≥ 0 (0: every one), got %d", *limit)
	}
	req := &policydv1.ListIncidentsRequest{OpenOnly: *open, Provider: *provider, Model: *model, Bucket: *bucket}
	if *since != "" {
		t, err := parseSince(*since, now)
		if err != nil {
			return usageErrorf("incidents: --since: %v", err)
		}
		req.Since = timestamppb.New(t)
	}
	var id int64
	if fs.NArg() == 1 {
		var err error
		if id, err = strconv.ParseInt(fs.Arg(0), 10, 64); err != nil || id <= 0 {
			return usageErrorf("incidents: want an incident id (a positive number, as the list shows it), got %q", fs.Arg(0))
		}
	}
	conn, err := ff.dial("incidents")
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	fc := policydv1.NewFleetServiceClient(conn)
	if id > 0 {
		c, cancel := ff.call(ctx)
		defer cancel()
		resp, err := fc.GetIncident(c, &policydv1.GetIncidentRequest{Id: id})
		if err != nil {
			return fmt.Errorf("incidents %d: %w", id, err)
		}
		return printJSON(stdout, resp)
	}
	all := &policydv1.ListIncidentsResponse{}
	for {
		if *limit > 0 {
			req.PageSize = int32(min(*limit-len(all.Incidents), maxIncidentsPage))
		}
		c, cancel := ff.call(ctx)
		page, err := fc.ListIncidents(c, req)
		cancel()
		if err != nil {
			return fmt.Errorf("incidents: %w", err)
		}
		all.Incidents = append(all.Incidents, page.GetIncidents()...)
		if page.GetNextPageToken() == "" || (*limit > 0 && len(all.Incidents) >= *limit) {
			break
		}
		req.PageToken = page.GetNextPageToken()
	}
	return printJSON(stdout, all)
}

// maxIncidentsPage is the largest page ListIncidents gives.
const maxIncidentsPage = 500

// parseSince reads --since: a duration before now, or an RFC 3339 time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("a duration ago must not be negative, got %s", s)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("want a duration ago (24h) or an RFC 3339 time (2026-11-27T10:00:00Z), got %q", s)
	}
	return t, nil
}
