package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/loadgen"
)

// The soak (`make soak`): mixed RPCs against policyd for a bounded time,
// failing on any error, on more than maxUnjournaled of the journaled
// NextDelay calls answered journaled=false, or on RSS growth beyond
// rssGrowthLimit.

// soakWarmup is how long the load runs before the starting RSS is read:
// long enough for the connection pools and buffers to reach their working
// size, so that what grows afterwards is growth.
const soakWarmup = 5 * time.Second

// rssGrowthLimit is how much policyd's resident set may grow between the
// end of the warm-up and the end of the soak: the larger of 16 MiB and a
// quarter of the starting RSS. A Go heap under steady load breathes by up
// to its live size between collections (GOGC=100), which for a ~30 MiB
// daemon is several MiB; a leak of a goroutine or a request per call grows
// by hundreds of MiB a minute at soak rates.
func rssGrowthLimit(start int64) int64 { return max(16<<20, start/4) }

// maxUnjournaled is the fraction of journaled NextDelay calls that may
// answer journaled=false. That answer is by design, not an error: NextDelay
// waits --journal-timeout (250ms) for its commit and then answers anyway,
// and on a busy shared machine a few commits take longer. A journal that
// falls behind, or stops, misses far more than 1%.
const maxUnjournaled = 0.01

// soakResult is what a soak measured.
type soakResult struct {
	seconds          float64
	concurrency      int
	result           *loadgen.Result // the measured part, after the warm-up
	warmupErrors     int
	journaled        int64 // journaled NextDelay calls answered, warm-up included
	unjournaled      int64 // of those, how many answered journaled=false
	rssStart, rssEnd int64
}

// summaryLine is the soak's one line for people and scripts.
func (r soakResult) summaryLine() string {
	return fmt.Sprintf("soak: seconds=%g concurrency=%d requests=%d errors=%d unjournaled=%d/%d rps=%.0f p99=%s rss_start=%.1fMiB rss_end=%.1fMiB",
		r.seconds, r.concurrency, r.result.Calls, r.result.Errors+r.warmupErrors, r.unjournaled, r.journaled, r.result.RPS(),
		fmtLatency(r.result.Percentile(0.99)), mib(r.rssStart), mib(r.rssEnd))
}

// check returns why the soak failed, or nil.
func (r soakResult) check() error {
	var errs []error
	if n := r.result.Errors + r.warmupErrors; n > 0 {
		errs = append(errs, fmt.Errorf("%d calls failed, the first: %v", n, r.result.FirstErr))
	}
	if float64(r.unjournaled) > maxUnjournaled*float64(r.journaled) {
		errs = append(errs, fmt.Errorf("%d of %d journaled NextDelay calls answered journaled=false, more than %g%%",
			r.unjournaled, r.journaled, 100*maxUnjournaled))
	}
	if r.result.Calls == 0 {
		errs = append(errs, errors.New("no calls were made"))
	}
	if limit := rssGrowthLimit(r.rssStart); r.rssEnd-r.rssStart > limit {
		errs = append(errs, fmt.Errorf("RSS grew from %.1f MiB to %.1f MiB, more than the %.1f MiB allowed",
			mib(r.rssStart), mib(r.rssEnd), mib(limit)))
	}
	return errors.Join(errs...)
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// soakSteps is the number of calls in one soak cycle (see soakCall).
const soakSteps = 10

// soakCall returns the soak's call: each worker runs cycles of soakSteps
// calls, a mix of what agents send: two Classify, a NextDelay, a journaled
// NextDelay (a new context every 5 attempts), and the life of a failed
// RetryContext: BeginContext, two RecordAttempt, FinishContext FAILED,
// GetContext, GetErrorReport. run keeps the context ids of two soaks apart.
func soakCall(run uint32, conns []*grpc.ClientConn, journaled, unjournaled *atomic.Int64) loadgen.Call {
	type clients struct {
		pc policydv1.PolicyServiceClient
		jc policydv1.JournalServiceClient
	}
	cs := make([]clients, len(conns))
	for i, cc := range conns {
		cs[i] = clients{policydv1.NewPolicyServiceClient(cc), policydv1.NewJournalServiceClient(cc)}
	}
	provider := providerFailure()
	network := &policydv1.Failure{Provider: "anthropic", Operation: "chat.stream", ErrorName: "TypeError", Message: "fetch failed",
		Causes: []*policydv1.Cause{{Code: "UND_ERR_SOCKET", Message: "other side closed"}}}
	return func(ctx context.Context, w, seq int) error {
		c := cs[w%len(cs)]
		cycle := seq / soakSteps
		life := contextID(run, 4, w, cycle) // the context whose life this cycle runs
		var err error
		switch seq % soakSteps {
		case 0:
			_, err = c.pc.Classify(ctx, &policydv1.ClassifyRequest{Failure: provider})
		case 1:
			_, err = c.pc.NextDelay(ctx, &policydv1.NextDelayRequest{Failure: network, Attempt: int32(cycle%attemptsPerContext + 1)})
		case 2:
			var resp *policydv1.NextDelayResponse
			resp, err = c.pc.NextDelay(ctx, &policydv1.NextDelayRequest{Failure: provider, Attempt: int32(cycle%attemptsPerContext + 1),
				ContextId: contextID(run, 3, w, cycle/attemptsPerContext)})
			if err == nil {
				journaled.Add(1)
				if !resp.GetDecision().GetJournaled() {
					unjournaled.Add(1)
				}
			}
		case 3:
			_, err = c.jc.BeginContext(ctx, &policydv1.BeginContextRequest{ContextId: life, Agent: "soak", Provider: "google", Operation: "chat"})
		case 4, 5:
			_, err = c.jc.RecordAttempt(ctx, &policydv1.RecordAttemptRequest{ContextId: life, Attempt: int32(seq%soakSteps - 3), Failure: provider})
		case 6:
			_, err = c.jc.FinishContext(ctx, &policydv1.FinishContextRequest{ContextId: life, Outcome: policydv1.Outcome_OUTCOME_FAILED})
		case 7:
			var resp *policydv1.GetContextResponse
			if resp, err = c.jc.GetContext(ctx, &policydv1.GetContextRequest{ContextId: life}); err == nil && len(resp.GetAttempts()) != 2 {
				err = fmt.Errorf("GetContext %s: %d attempts, want 2", life, len(resp.GetAttempts()))
			}
		case 8:
			_, err = c.jc.GetErrorReport(ctx, &policydv1.GetErrorReportRequest{ContextId: life})
		case 9:
			_, err = c.pc.Classify(ctx, &policydv1.ClassifyRequest{Failure: network})
		}
		return err
	}
}

// runSoak warms up for soakWarmup, reads policyd's RSS, runs the mixed load
// for c.seconds, reads the RSS again, and prints the summary line; it fails
// when check does.
func runSoak(ctx context.Context, c config, s *servers, out io.Writer) error {
	d := time.Duration(c.seconds * float64(time.Second))
	fmt.Fprintf(out, "soak: %v warm-up, then %v of mixed RPCs from %d clients over %d connections\n", soakWarmup, d, c.concurrency, c.conns)
	base := rand.Uint32()
	var journaled, unjournaled atomic.Int64
	warm := loadgen.Run(ctx, c.concurrency, soakWarmup, soakCall(base, s.pdConns, &journaled, &unjournaled))
	if err := ctx.Err(); err != nil {
		return err
	}
	rssStart, err := s.policyd.rss()
	if err != nil {
		return err
	}
	r := soakResult{seconds: c.seconds, concurrency: c.concurrency, warmupErrors: warm.Errors, rssStart: rssStart}
	r.result = loadgen.Run(ctx, c.concurrency, d, soakCall(base+1, s.pdConns, &journaled, &unjournaled))
	if err := ctx.Err(); err != nil {
		return err
	}
	if r.rssEnd, err = s.policyd.rss(); err != nil {
		return err
	}
	if r.result.FirstErr == nil {
		r.result.FirstErr = warm.FirstErr
	}
	r.journaled, r.unjournaled = journaled.Load(), unjournaled.Load()
	fmt.Fprintln(out, r.summaryLine())
	return r.check()
}
