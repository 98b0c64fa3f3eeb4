package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/policyd/policyd/internal/journal/bulkload"
)

// runGrowth measures the journal's write throughput (RecordAttempt) and the
// journaled NextDelay's latency as the journal grows to each size, filling
// it with COPY between measurements.
func runGrowth(ctx context.Context, c config, s *servers, out io.Writer) error {
	names := []string{"nextdelay_journaled", "record_attempt"}
	perRound := time.Duration(c.seconds / float64(c.rounds) * float64(time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "Run of %s on %s; each size: %d rounds of %v per scenario, %d calls in flight.\n\n",
		time.Now().UTC().Format("2006-01-02"), describeMachine(), c.rounds, perRound, c.concurrency)
	b.WriteString("| attempt rows | fill (COPY) | RecordAttempt RPS | RecordAttempt p99 | journaled NextDelay RPS | journaled NextDelay p99 |\n|---:|---:|---:|---:|---:|---:|\n")
	for _, size := range c.growth {
		have, err := bulkload.AttemptRows(ctx, c.databaseURL)
		if err != nil {
			return err
		}
		fill := time.Duration(0)
		if size > have {
			t0 := time.Now()
			contexts := int((size - have + attemptsPerContext - 1) / attemptsPerContext)
			for done := 0; done < contexts; done += 200_000 { // a transaction per 1 M rows
				if _, err := bulkload.Load(ctx, c.databaseURL, min(200_000, contexts-done), attemptsPerContext, time.Now()); err != nil {
					return err
				}
			}
			fill = time.Since(t0)
			fmt.Fprintf(out, "filled the journal to %d attempt rows in %v\n", size, fill.Round(time.Second))
		}
		ms, err := measure(ctx, c, s, names, perRound, out)
		if err != nil {
			return err
		}
		rows, err := bulkload.AttemptRows(ctx, c.databaseURL)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "| %d | %v | %.0f | %s | %.0f | %s |\n", rows, fill.Round(time.Second),
			ms[1].result.RPS(), fmtLatency(ms[1].result.Percentile(0.99)),
			ms[0].result.RPS(), fmtLatency(ms[0].result.Percentile(0.99)))
	}
	fmt.Fprintln(out)
	fmt.Fprint(out, b.String())
	if c.doc != "" {
		return replaceSection(c.doc, "make bench-growth", b.String())
	}
	return nil
}
