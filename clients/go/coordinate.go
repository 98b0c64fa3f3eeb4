package policyd

import (
	"context"
	"errors"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	policydv1 "github.com/policyd/policyd/clients/go/internal/gen/policyd/v1"
)

// The Coordinate stream (docs/clients.md, "The fleet gate"): one per
// Client, opened by the first call that names a provider. It sends the
// client id and profile, then about once a second the usage of every
// target with activity, and delivers the assignments policyd pushes to the
// gate. It runs on its own goroutine and never blocks a call: a call reads
// the gate's table, whatever state the stream is in. The stream paces
// itself on the system clock; the gate's times come from the client's
// Clock.

// The stream's timing.
const (
	reportEvery       = time.Second // ± reportJitter
	reportJitter      = 0.1
	reconnectInitial  = time.Second // doubling, full jitter
	reconnectMax      = 30 * time.Second
	healthyAfter      = 30 * time.Second // a stream up this long resets the backoff
	closeGrace        = 250 * time.Millisecond
	maxUsagesPerMsg   = 256
	maxReportElapsed  = 10 * time.Minute
	maxUsageCount     = 1000             // per count, and admitted and shed together, in one report (policyd: 1,000 a second of it, at least a second)
	keepaliveInterval = 30 * time.Second // policyd allows pings every 15 s
)

// reconnectParams is the connection's redial backoff: 0.5 s growing to
// 1 s, so that the stream (which waits for the connection) is back within
// about a second of policyd.
var reconnectParams = backoff.Config{BaseDelay: 500 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second}

// coordinator runs one client's stream.
type coordinator struct {
	c      *Client
	fleet  policydv1.FleetServiceClient
	ctx    context.Context // cancelled by Client.Close
	cancel context.CancelFunc
	done   chan struct{}

	profile   string   // sent in the first message; dropped if policyd refuses it
	lastBatch []target // the targets of the last report sent, to name the one policyd refused
	sessions  int      // streams opened so far
}

// kickStream asks the stream to send the urgent reports now.
func (c *Client) kickStream() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// ensureStream starts the client's stream unless it runs, ran, the gate is
// off or the client is closed. It costs one atomic load once started.
func (c *Client) ensureStream() {
	if c.gate == nil || c.streamStarted.Load() {
		return
	}
	c.coordMu.Lock()
	defer c.coordMu.Unlock()
	if c.streamStarted.Load() {
		return
	}
	c.streamStarted.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	co := &coordinator{c: c, fleet: c.fleet, ctx: ctx, cancel: cancel, done: make(chan struct{}), profile: c.cfg.profile}
	c.coord = co
	go co.run()
}

// stopStream closes the stream, if one runs, and waits for its goroutines.
func (c *Client) stopStream() {
	c.coordMu.Lock()
	c.streamStarted.Store(true) // no stream after Close
	co := c.coord
	c.coordMu.Unlock()
	if c.gate != nil {
		c.gate.setDown(true) // a call after Close waits for nothing
	}
	if co != nil {
		co.cancel()
		<-co.done
	}
}

func (co *coordinator) run() {
	defer close(co.done)
	failures := 0
	for {
		healthy, final := co.session()
		co.c.gate.setDown(true)
		if final || co.ctx.Err() != nil {
			return
		}
		if healthy {
			failures = 0
		}
		failures++
		wait := co.reconnectWait(failures)
		co.c.cfg.logger.Debug("policyd: fleet stream reconnecting", "in", wait.Round(time.Millisecond))
		t := time.NewTimer(wait)
		select {
		case <-co.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// session runs one stream until it breaks or the client closes. healthy:
// it worked for a while (the reconnect backoff starts over); final: do not
// reconnect.
func (co *coordinator) session() (healthy, final bool) {
	// The stream has a context of its own so that Close can half-close it
	// and let policyd end it; a watcher cancels it closeGrace after Close
	// in case policyd (or the network) does not.
	sctx, scancel := context.WithCancel(context.WithoutCancel(co.ctx))
	var open atomic.Bool // the stream is up: Close lets it end cleanly
	watcherDone := make(chan struct{})
	stopWatcher := context.AfterFunc(co.ctx, func() {
		defer close(watcherDone)
		if !open.Load() {
			scancel() // still connecting: nothing to end cleanly
			return
		}
		t := time.NewTimer(closeGrace)
		defer t.Stop()
		select {
		case <-t.C:
			scancel()
		case <-sctx.Done():
		}
	})
	defer func() {
		scancel()
		if !stopWatcher() {
			<-watcherDone
		}
	}()

	// The first stream fails at once when policyd cannot be reached (the
	// calls waiting for their first assignment go on without it); later
	// ones wait for the connection, which gRPC redials with its own
	// backoff, so that the stream is back as soon as policyd is.
	co.sessions++
	stream, err := co.fleet.Coordinate(sctx, grpc.WaitForReady(co.sessions > 1))
	started := time.Now()
	if err != nil {
		return false, co.broken(err)
	}
	if err := stream.Send(&policydv1.CoordinateRequest{ClientId: co.c.cfg.clientID, Profile: co.profile}); err != nil {
		if errors.Is(err, io.EOF) {
			// The stream ended; its status comes from Recv.
			_, err = stream.Recv()
		}
		return false, co.broken(err)
	}
	open.Store(true)
	co.c.gate.setDown(false)
	var got atomic.Bool
	recvErr := make(chan error, 1)
	go func() {
		for {
			resp, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			got.Store(true)
			co.apply(resp)
		}
	}()
	healthyNow := func() bool { return got.Load() || time.Since(started) >= healthyAfter }

	sendFailed := func(err error) (bool, bool) {
		if errors.Is(err, io.EOF) {
			// The stream ended; Recv says why.
			err = <-recvErr
		} else {
			scancel()
			<-recvErr
		}
		return healthyNow(), co.broken(err)
	}
	// A new stream knows nothing: report every subscribed target.
	if err := co.sendReports(stream, reportResubscribe); err != nil {
		return sendFailed(err)
	}
	tick := time.NewTimer(co.reportInterval())
	defer tick.Stop()
	for {
		kind := reportActive
		select {
		case <-tick.C:
			tick.Reset(co.reportInterval())
		case <-co.c.kick:
			kind = reportUrgent
		case err := <-recvErr:
			return healthyNow(), co.broken(err)
		case <-co.ctx.Done():
			// Closing: the counts not yet sent go with this last report,
			// then the stream ends from this side and policyd ends it.
			_ = co.sendReports(stream, reportActive)
			_ = stream.CloseSend()
			<-recvErr // policyd's end, or the watcher's cancel
			return false, true
		}
		if err := co.sendReports(stream, kind); err != nil {
			return sendFailed(err)
		}
	}
}

// sendReports sends the usage of every target with activity (and, after a
// reconnect, of every subscribed target), at most maxUsagesPerMsg a
// message. Counts that could not be sent stay for the next report.
func (co *coordinator) sendReports(stream interface {
	Send(*policydv1.CoordinateRequest) error
}, kind reportKind) error {
	g := co.c.gate
	rs := g.takeReports(kind)
	now := co.c.cfg.clock.Now()
	for len(rs) > 0 {
		n := min(len(rs), maxUsagesPerMsg)
		batch := rs[:n]
		req := &policydv1.CoordinateRequest{Usage: make([]*policydv1.BucketUsage, 0, n)}
		targets := make([]target, 0, n)
		for _, r := range batch {
			req.Usage = append(req.Usage, r.proto(now))
			targets = append(targets, r.t)
		}
		if err := stream.Send(req); err != nil {
			g.giveBack(rs)
			return err
		}
		co.lastBatch = targets
		g.reported(batch, now)
		rs = rs[n:]
	}
	return nil
}

// proto is r as a report at now, its counts within what policyd accepts.
func (r report) proto(now time.Time) *policydv1.BucketUsage {
	u := r.u
	admitted := clampCount(u.admitted)
	shed := min(clampCount(u.shed), maxUsageCount-admitted)
	retries := clampCount(u.retries)
	parkedNew := clampCount(u.parkedNew)
	// The calls whose output is counted: at most the attempts the report
	// counts, as policyd checks them, with their share of the output (the
	// average a call is what policyd reads), at most maxCallInputTokens a
	// call.
	outputCalls, outputTokens := min(u.outputTokensUsedCalls, admitted+retries), u.outputTokensUsed
	if outputCalls < u.outputTokensUsedCalls {
		outputTokens = outputTokens * outputCalls / u.outputTokensUsedCalls
	}
	return &policydv1.BucketUsage{
		Target: r.t.proto(), Elapsed: durationProto(min(max(now.Sub(r.from), time.Millisecond), maxReportElapsed)),
		Admitted: admitted, Shed: shed, FellBack: min(u.fellBack, shed), Succeeded: clampCount(u.succeeded),
		Failed: clampCount(u.failed), Retries: retries,
		RateLimitHeaders: u.rateLimits,
		// Batch calls are among the first attempts; tokens at most
		// maxCallInputTokens for each call the report counts (a parked
		// call's tokens, counted at its first check, within the bound of
		// the calls admitted and shed with it).
		Parked: r.parked, ParkedNew: parkedNew, Released: min(clampCount(u.released), admitted),
		BatchFirstAttempts:      min(u.batchFirst, admitted+shed+parkedNew),
		FirstAttemptInputTokens: min(u.firstInputTokens, maxCallInputTokens*(admitted+shed+parkedNew)),
		RetryInputTokens:        min(u.retryInputTokens, maxCallInputTokens*retries),
		// What responses said their calls used, and those calls'
		// estimates: each within the bound of the attempts the report
		// counts (admitted and retries), as policyd checks them.
		InputTokensUsed:             min(u.inputTokensUsed, maxCallInputTokens*(admitted+retries)),
		InputTokensEstimatedForUsed: min(u.inputTokensEstimatedForUsed, maxCallInputTokens*(admitted+retries)),
		OutputTokensUsed:            min(outputTokens, maxCallInputTokens*outputCalls),
		OutputTokensUsedCalls:       outputCalls,
		InFlight:                    r.inFlight,
	}
}

// apply hands the assignments of one message to the gate.
func (co *coordinator) apply(resp *policydv1.CoordinateResponse) {
	now := co.c.cfg.clock.Now()
	for _, pa := range resp.GetAssignments() {
		pt := pa.GetTarget()
		if pt.GetProvider() == "" {
			continue
		}
		t := target{provider: strings.ToLower(pt.GetProvider()), model: pt.GetModel(), keyID: pt.GetKeyId()}
		if pa.GetAbandon() {
			co.c.gate.assign(now, t, nil)
			continue
		}
		co.c.gate.assign(now, t, assignmentFromProto(pa))
	}
}

// clampCount keeps a count within what policyd accepts in one report.
func clampCount(n uint64) uint64 { return min(n, maxUsageCount) }

var usageIndex = regexp.MustCompile(`usage\[(\d+)\]`)

// broken handles the error that ended a stream; it reports whether to stop
// using the stream for good.
func (co *coordinator) broken(err error) (final bool) {
	c := co.c
	if co.ctx.Err() != nil {
		return true // the client closed
	}
	st := status.Convert(err)
	switch st.Code() {
	case codes.FailedPrecondition, codes.Unimplemented:
		// policyd runs without fleet memory (--fleet off), or predates the
		// stream: the gate admits everything, and the client stops asking.
		// An operator's choice, not a fault: a debug line, no warning.
		c.gate.turnOff()
		c.cfg.logger.Debug("policyd: the daemon has no fleet stream; the fleet gate admits every call",
			"addr", c.addr, "error", err)
		return true
	case codes.Unauthenticated, codes.PermissionDenied:
		c.warnOnce("coordinate/"+st.Code().String(), "policyd: the daemon refused the fleet stream; "+
			"the fleet gate admits every call (set POLICYD_TOKEN, or WithToken, to a token of the daemon's --auth-tokens file)",
			"error", err)
		c.gate.turnOff()
		return true
	case codes.InvalidArgument:
		// A report policyd refused: stop reporting the target it names, or
		// the profile, and go on; the usages before it were applied.
		msg := st.Message()
		switch m := usageIndex.FindStringSubmatch(msg); {
		case m != nil:
			var t target
			if i, _ := strconv.Atoi(m[1]); i < len(co.lastBatch) {
				t = co.lastBatch[i]
				c.gate.reject(t)
			}
			c.warnOnce("coordinate/"+msg, "policyd: the daemon refused a fleet report; its target is no longer reported",
				"target", t.String(), "error", err)
		case strings.HasPrefix(msg, "profile"):
			co.profile = ""
			c.warnOnce("coordinate/profile", "policyd: the daemon refused the fleet stream's profile; "+
				"the stream goes on without it (assignments name the default profile's fallbacks)", "error", err)
		default:
			c.warnOnce("coordinate/"+msg, "policyd: the daemon refused the fleet stream", "error", err)
		}
		return false
	}
	c.cfg.logger.Debug("policyd: fleet stream broke", "error", err)
	return false
}

// ObserveRateLimits hands policyd the rate-limit headers of a successful
// response to call's target (its Provider, Model and KeyID): the
// x-ratelimit-* and anthropic-ratelimit-* headers (at most 16, each value
// clipped to 64 bytes) go with the target's next report, where policyd
// reads the provider's limits from them. Other headers are ignored; a call
// without a provider, or a client with the fleet gate off, sends nothing.
// It makes no RPC.
func (c *Client) ObserveRateLimits(call Call, h http.Header) {
	if t, ok := targetOf(call); ok {
		c.observeRateLimits(t, h)
	}
}

// observeRateLimits is ObserveRateLimits for target t.
func (c *Client) observeRateLimits(t target, h http.Header) {
	if c.gate == nil {
		return
	}
	kept := rateLimitHeaders(h)
	if kept == nil {
		return
	}
	c.gate.observeRateLimits(c.cfg.clock.Now(), t, kept)
	c.ensureStream()
}

// rateLimitHeaders keeps the rate-limit headers of h: names in lower case,
// repeated values joined with ", ", values longer than policyd accepts
// dropped, the first 16 names in order.
func rateLimitHeaders(h http.Header) map[string]string {
	var kept [maxRateLimits]string
	names := kept[:0]
	for name := range h {
		if rateLimitName(name) && len(name) <= maxHeaderNameBytes {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	if len(names) > maxRateLimits { // which 16: the first by name, whatever the map's order
		slices.SortFunc(names, func(a, b string) int { return strings.Compare(strings.ToLower(a), strings.ToLower(b)) })
	}
	out := make(map[string]string, min(len(names), maxRateLimits))
	for _, name := range names {
		if len(out) == maxRateLimits {
			break
		}
		v := h[name]
		joined := ""
		if len(v) == 1 {
			joined = v[0]
		} else {
			joined = strings.Join(v, ", ")
		}
		if len(joined) > maxRateLimitByte {
			continue // a clipped limit would misstate it: dropped, as the other clients do
		}
		out[strings.ToLower(name)] = joined // no copy when already lower case
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// rateLimitPrefixes are the prefixes of the rate-limit headers policyd
// reads.
var rateLimitPrefixes = []string{"x-ratelimit-", "anthropic-ratelimit-"}

// rateLimitName says whether a header name, in any case, is a rate-limit
// header policyd reads.
func rateLimitName(n string) bool {
	for _, p := range rateLimitPrefixes {
		if len(n) > len(p) && strings.EqualFold(n[:len(p)], p) {
			return true
		}
	}
	return false
}

// reconnectWait is the wait before the stream's next connection after
// failures in a row: full jitter under a doubling ceiling, drawn from the
// client's random source (WithRand).
func (co *coordinator) reconnectWait(failures int) time.Duration {
	ceiling := min(reconnectMax, reconnectInitial<<min(failures-1, 5))
	return time.Duration(co.c.cfg.rand.Float64() * float64(ceiling))
}

// reportInterval is the time to the next report: reportEvery ± reportJitter,
// drawn from the client's random source, so that a fleet's processes do
// not report in step.
func (co *coordinator) reportInterval() time.Duration {
	return reportEvery + time.Duration((co.c.cfg.rand.Float64()*2-1)*reportJitter*float64(reportEvery))
}
