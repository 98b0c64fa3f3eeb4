package fleet

import (
	"fmt"
	"math"
	"time"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/enums"
)

// BreakerState is a circuit breaker's state.
type BreakerState uint8

const (
	Closed BreakerState = iota
	Open
	HalfOpen
)

func (s BreakerState) String() string {
	switch s {
	case Open:
		return "open"
	case HalfOpen:
		return "half_open"
	}
	return "closed"
}

// Bucket is one bucket's state. Its fields are read and written only under
// the store's lock.
type Bucket struct {
	key         Key
	idx         int // its place in the store's walk order (buckets.all)
	lastFailure time.Time
	firstClient string // whose failure started the current incident
	changed     int64  // decisions the fleet changed

	// hold: a shared cooldown, released in staggered slots.
	holdUntil time.Time
	holdSpan  time.Duration // the hold's length when set, which sizes the release window
	waiters   int           // retries already given a slot in this hold

	// stop: every agent on the key stops.
	stopUntil time.Time
	stopWhy   string

	// breaker
	state       BreakerState
	openUntil   time.Time
	openPeriod  time.Duration
	openWhy     string
	halfOpenAt  time.Time
	nextProbe   time.Time
	lastCounted time.Time
	window      ring
	clients     map[string]time.Time

	// budget
	tokens    float64
	tokensAt  time.Time
	exhausted bool

	// What Coordinate streams report (assignment.go): outcomes and first
	// attempts per second over the breaker's window, successes since the
	// breaker went half-open, the end of the last close (slow start), the
	// provider's request limit, and the stream clients' hold slots.
	successes, admitted, firstAttempts, retries ring
	probeOK                                     int
	reportedAt, closedAt                        time.Time
	// streamedElsewhere: when another replica last said streams report on
	// the bucket there. Kept apart from reportedAt, which only this
	// replica's streams move: a replica that passed on the others' word
	// as its own would keep the flag, and the bucket, alive for ever.
	streamedElsewhere time.Time
	limits            [3]learntLimit    // requestLimit, tokenLimit, outputLimit: limitKinds (pace.go)
	left              [3]limitLeft      // what the last headers said is left of them
	tokenDemand       *tokenDemand      // tokens reported, once a stream reports some
	batchFirst        ring              // batch-class first attempts, once a stream reports some (classes.go)
	inFlightBy        map[string]int64  // each streamed client's requests in flight (leases.go)
	leases            map[string]uint32 // the last apportionment of the cap
	leasedAt          time.Time
	leaseCap          int
	paceWhyKey        paceWhyKey // what paceWhyText says
	paceWhyText       string
	cut               float64 // pacing's cut after 429s (see throttled)
	cutAt             time.Time
	cutRise           float64   // the cut's rise a second (riseAfterCut)
	bound             int       // the limit that bound the pace when it was last computed
	paceNotes         []Event   // pace changes not yet published (pace.go)
	paceNoteAt        time.Time // the last cut's event
	paceCuts          int64     // cuts since it
	holdSlots         map[string]int
	streamClients     map[string]int64 // client → last report, Unix ns (8 bytes, not a time.Time's 24: one per bucket)
	shed              shedNote         // the gates' calls not sent at once, for the next shed event (shed.go)
	totals            streamTotals
	parkState
	grants paceGrants // a paced bucket's grants to the gates (grants.go)

	// A shared fleet's (replica.go, shared_counts.go): the breaker's shared
	// version, local transitions made and pushed, registers raised here and
	// not pushed yet, the other replicas' counts, this replica's probe slot,
	// the retries decisions were asked for (its share of the budget).
	version, moves, movesPushed int64
	raisedHold, raisedStop      bool
	limitsShared                [limitKinds]int64
	asksPublished               int64
	probeOKShared               int
	remote                      map[string]remoteCounts
	probeSlot                   time.Time
	wantProbe                   bool
	asks                        ring

	// An operator's last clear (clear.go): when, what, and whether it is
	// still to be pushed to the other replicas.
	cleared     time.Time
	clearedWhat Clearing
	raisedClear bool
}

// streamTotals are a bucket's stream counts since the daemon started.
type streamTotals struct {
	reports, assignments, admitted, shed, successes int64
}

// Key is the bucket's name.
func (b *Bucket) Key() Key { return b.key }

// active says whether anything in the bucket still acts on decisions.
func (b *Bucket) active(now time.Time) bool {
	return now.Before(b.holdUntil) || now.Before(b.stopUntil) || b.state != Closed || b.exhausted
}

// countedForBreaker: the failure types that say a provider's model is
// failing for everyone.
func countedForBreaker(t policydv1.FailureType) bool {
	switch t {
	case policydv1.FailureType_FAILURE_TYPE_OVERLOADED, policydv1.FailureType_FAILURE_TYPE_SERVER_ERROR,
		policydv1.FailureType_FAILURE_TYPE_TIMEOUT, policydv1.FailureType_FAILURE_TYPE_CONNECTION_ERROR:
		return true
	}
	return false
}

// stopsKey: the failure types no agent on the same key can get past.
func stopsKey(t policydv1.FailureType) bool {
	switch t {
	case policydv1.FailureType_FAILURE_TYPE_AUTH_INVALID, policydv1.FailureType_FAILURE_TYPE_PERMISSION_DENIED,
		policydv1.FailureType_FAILURE_TYPE_QUOTA_EXHAUSTED:
		return true
	}
	return false
}

// advance moves the breaker along its timers: open → half-open when the
// open period ends, half-open → closed after CloseAfter with no counted
// failure.
func (b *Bucket) advance(now time.Time, cfg *Config, emit func(Event)) {
	c := &cfg.Breaker
	if b.state == Open && !now.Before(b.openUntil) {
		b.state, b.halfOpenAt, b.nextProbe = HalfOpen, b.openUntil, b.openUntil
		b.moves++
		emit(Event{At: b.openUntil, Key: b.key, Kind: EventBreakerHalfOpen,
			Reason: fmt.Sprintf("open for %v; probing, 1 retry per %v for the fleet", b.openPeriod, c.ProbeInterval)})
	}
	if b.state != HalfOpen {
		return
	}
	if b.streamed(now, c) {
		// Clients report their successes: close on the probes' successes.
		if ok := int64(b.probeOK) + b.others(now).probeOK; ok >= int64(c.CloseSuccesses) {
			b.close(now, fmt.Sprintf("%d successes reported while half-open", ok), cfg, emit)
		}
		return
	}
	quietSince := b.halfOpenAt
	if b.lastCounted.After(quietSince) {
		quietSince = b.lastCounted
	}
	if at := quietSince.Add(c.CloseAfter); !now.Before(at) {
		b.close(at, fmt.Sprintf("no counted failure for %v while half-open", c.CloseAfter), cfg, emit)
	}
}

// reopenPeriod is the open period after a failed probe: doubled up to
// MaxOpenFor, unless streams report on the bucket. Their gates ration the
// probes fleet-wide (about one a second), so a failed probe costs a single
// attempt, and a long open period only delays the recovery: in the
// simulation, 55 s from the provider's recovery to 95 % goodput with
// doubling; with two probe intervals, a median of about 8 s
// (docs/fleet-simulation.md).
func (b *Bucket) reopenPeriod(now time.Time, c *BreakerConfig) time.Duration {
	if b.streamed(now, c) {
		if b.parkedTotal() > 0 {
			// Parked calls wait for the daemon's word, not a timer: a probe
			// every parkedReopen keeps the attempts an outage costs at a
			// tenth of the calls that start in it.
			return min(c.OpenFor, parkedReopen*c.ProbeInterval)
		}
		return min(c.OpenFor, 2*c.ProbeInterval)
	}
	return min(2*b.openPeriod, c.MaxOpenFor)
}

// streamed says whether Coordinate streams report on the bucket (within
// the breaker's window), so that its successes are known.
func (b *Bucket) streamed(now time.Time, c *BreakerConfig) bool {
	return b.streamedHere(now, c) || (!b.streamedElsewhere.IsZero() && now.Sub(b.streamedElsewhere) < c.Window)
}

// streamedHere says whether this replica's own streams report on the
// bucket: what it tells the others.
func (b *Bucket) streamedHere(now time.Time, c *BreakerConfig) bool {
	return !b.reportedAt.IsZero() && now.Sub(b.reportedAt) < c.Window
}

func (b *Bucket) close(at time.Time, why string, c *Config, emit func(Event)) {
	b.state, b.openPeriod, b.probeOK, b.closedAt = Closed, 0, 0, at
	b.startRelease(at, ReleaseFactor, false)
	b.moves++
	b.window.reset()
	b.successes.reset()
	clear(b.clients)
	emit(Event{At: at, Key: b.key, Kind: EventBreakerClose, Reason: why})
	if c.SlowStart.Window > 0 {
		emit(Event{At: at, Key: b.key, Kind: EventSlowStart,
			Reason: fmt.Sprintf("first attempts admitted from %.0f %% to all over %v", 100*c.SlowStart.From, c.SlowStart.Window),
			Counts: map[string]int64{"window_ms": c.SlowStart.Window.Milliseconds()}})
	}
}

// countFailure records a counted failure and opens the breaker when the
// window has enough of them from enough clients.
func (b *Bucket) countFailure(now time.Time, client, who string, t policydv1.FailureType, c *BreakerConfig, emit func(Event)) {
	b.lastCounted = now
	switch b.state {
	case Open:
		return
	case HalfOpen:
		// A failure while probing: the provider is not back.
		b.open(now, b.reopenPeriod(now, c), client,
			fmt.Sprintf("a %s while half-open", typeName(t)), emit)
		return
	}
	b.addFailures(now, who, 1, c)
	b.maybeOpen(now, client, typeName(t), c, emit)
}

func (b *Bucket) ensureRings(c *BreakerConfig) {
	if b.window.secs == nil {
		rs := newRings(c.Window, 6)
		b.window, b.successes, b.admitted, b.firstAttempts, b.retries, b.asks = rs[0], rs[1], rs[2], rs[3], rs[4], rs[5]
	}
}

// addFailures counts n failures of client's in the breaker's window
// (client as Origin.clientKey names it).
func (b *Bucket) addFailures(now time.Time, client string, n int, c *BreakerConfig) {
	b.ensureRings(c)
	b.window.add(now, n)
	if b.clients == nil {
		b.clients = make(map[string]time.Time)
	}
	if len(b.clients) < 1024 {
		b.clients[client] = now
	} else if _, ok := b.clients[client]; ok {
		b.clients[client] = now
	}
}

// maybeOpen opens a closed breaker whose window has enough outcomes, a
// high enough share of failures, from enough clients.
func (b *Bucket) maybeOpen(now time.Time, client, last string, c *BreakerConfig, emit func(Event)) {
	if b.state != Closed || b.window.secs == nil {
		return
	}
	o := b.others(now)
	failures := b.window.sum(now) + int(o.failures)
	volume := failures + b.successes.sum(now) + int(o.successes)
	window := c.Window
	if volume < c.MinVolume || float64(failures) < c.FailureRate*float64(volume) {
		// Not over the window: perhaps over the last seconds, when nearly
		// every outcome in them failed. A provider that went down is then
		// known in a second or two rather than once its failures outweigh
		// the window's successes from before (about 5 s at the defaults),
		// and the fleet does not send that many more first attempts into
		// it. The other replicas' last seconds are as of their last
		// published counts (a second old at most).
		secs := int(c.TripWindow / time.Second)
		if secs < 1 {
			return
		}
		failures = b.window.sumLast(now, secs) + int(o.recentFailures)
		volume = failures + b.successes.sumLast(now, secs) + int(o.recentSuccesses)
		if volume < c.MinVolume || float64(failures) < c.TripRate*float64(volume) {
			return
		}
		window = c.TripWindow
	}
	clients := b.windowClients(now, window)
	if len(b.remote) > 0 {
		clients += b.otherClients(now, window)
	}
	if clients < c.MinClients {
		return
	}
	why := fmt.Sprintf("%d failures in %v from %d clients (last: %s)", failures, window, clients, last)
	if volume > failures {
		why = fmt.Sprintf("%d of %d attempts failed in %v, from %d clients (last: %s)", failures, volume, window, clients, last)
	}
	b.noteBaseRate(now, c)
	b.open(now, c.OpenFor, client, why, emit)
}

func (b *Bucket) windowClients(now time.Time, window time.Duration) int {
	n := 0
	for id, at := range b.clients {
		if now.Sub(at) < window {
			n++
		} else {
			delete(b.clients, id)
		}
	}
	return n
}

func (b *Bucket) open(now time.Time, period time.Duration, client, why string, emit func(Event)) {
	if period <= 0 {
		period = time.Second
	}
	b.state, b.openPeriod, b.openUntil, b.openWhy, b.probeOK = Open, period, now.Add(period), why, 0
	b.moves++
	emit(Event{At: now, Key: b.key, Kind: EventBreakerOpen, ClientID: client,
		Reason: fmt.Sprintf("%s; open for %v", why, period),
		Counts: map[string]int64{"open_ms": period.Milliseconds()}})
}

// setHold moves the hold forward to now+hint (it never moves back); asked
// is what the server asked for, when the fleet's ceiling cut it.
func (b *Bucket) setHold(now time.Time, hint, asked time.Duration, client string, who Origin, emit func(Event)) {
	until := now.Add(hint)
	if !until.After(b.holdUntil) {
		return
	}
	b.raisedHold = true
	if !now.Before(b.holdUntil) { // a new hold, not an extension
		b.waiters, b.holdSpan = 0, hint
		clear(b.holdSlots)
		why := fmt.Sprintf("a server asked to wait %v", hint.Round(time.Millisecond))
		if asked > hint {
			why = fmt.Sprintf("a server asked to wait %v; the fleet holds %v (its ceiling, or the caller's profile's)",
				asked.Round(time.Millisecond), hint.Round(time.Millisecond))
		}
		emit(Event{At: now, Key: b.key, Kind: EventHoldSet, ClientID: client, Origin: who, Reason: why,
			Counts: map[string]int64{"hold_ms": hint.Milliseconds(), "asked_ms": asked.Milliseconds()}})
	}
	b.holdUntil = until
}

// slot is the i-th waiter's release offset after a hold or an open period:
// the i-th point of the van der Corput sequence (0, ½, ¼, ¾, ⅛, …) scaled to
// the release window. However many waiters come, and in whatever burst, the
// first n of them are spread evenly over the window, so the fleet returns
// at about n/window per second, never as one herd, without the daemon
// having to know n in advance. The first waiter leaves when the hold ends:
// a lone agent waits no longer than the server asked.
func slot(i int, window time.Duration) time.Duration {
	return time.Duration(vanDerCorput(i) * float64(window))
}

// vanDerCorput is i with its binary digits mirrored after the point.
func vanDerCorput(i int) float64 {
	v, base := 0.0, 0.5
	for ; i > 0; i >>= 1 {
		if i&1 == 1 {
			v += base
		}
		base /= 2
	}
	return v
}

// releaseWindow is how long after the hold its waiters are spread over.
func (b *Bucket) releaseWindow(c *HoldConfig) time.Duration {
	w := time.Duration(c.Spread * float64(b.holdSpan))
	return min(max(w, c.MinSpread), c.MaxSpread)
}

// refillRate is the budget's refill per second: the floor plus the ratio
// of the first attempts streams reported over the window; in a shared
// fleet, the fleet's rate times this replica's share.
func (b *Bucket) refillRate(now time.Time, c *Config) float64 {
	r := c.Budget.Floor
	if b.admitted.secs != nil {
		admitted := int64(b.admitted.sum(now)) + b.others(now).admitted
		r += c.Budget.Ratio * float64(admitted) / c.Breaker.Window.Seconds()
	}
	return r * b.share(now)
}

// burst is the most tokens the budget holds: Burst (this replica's share
// of it), or a second's refill when the reported traffic makes that larger.
func (b *Bucket) burst(now time.Time, c *Config) float64 {
	return max(c.Budget.Burst*b.share(now), b.refillRate(now, c))
}

// refill brings the budget's tokens up to now.
func (b *Bucket) refill(now time.Time, c *Config) {
	burst := b.burst(now, c)
	if b.tokensAt.IsZero() {
		b.tokens, b.tokensAt = burst, now
		return
	}
	if dt := now.Sub(b.tokensAt); dt > 0 {
		b.tokens = min(burst, b.tokens+b.refillRate(now, c)*dt.Seconds())
		b.tokensAt = now
	}
	if b.exhausted && b.tokens >= burst/2 {
		b.exhausted = false
	}
}

// admitFraction is the share of first attempts the gates admit: the slow
// start after a close (availability buckets) and the quota's pace (rate
// limit buckets), whichever is lower; byPace says the pace binds.
func (b *Bucket) admitFraction(now time.Time, c *Config) (f float64, why string, byPace bool) {
	f = 1
	// A release window after the close spreads the parked calls instead.
	if !b.closedAt.IsZero() && c.SlowStart.Window > 0 && b.state == Closed && b.releaseSpan == 0 {
		if el := now.Sub(b.closedAt); el < c.SlowStart.Window {
			f = c.SlowStart.From + (1-c.SlowStart.From)*float64(el)/float64(c.SlowStart.Window)
			why = fmt.Sprintf("slow start after the breaker closed: %.0f %% of first attempts", 100*f)
		}
	}
	if p, which := b.pace(now, c); p < f {
		f, why, byPace = p, b.paceWhy(now, c, p, which), true
	}
	return f, why, byPace
}

// pace is the share of first attempts that keeps the fleet at Share of the
// provider's request limit, of its input-token limit and of its
// output-token limit, and the limit that binds (pace.go: corroborated,
// expiring, AIMD), given the demand: the calls (and their tokens) the
// streams reported arriving, and each parked call drawing again every
// ParkRecheck.
func (b *Bucket) pace(now time.Time, c *Config) (float64, int) {
	b.fromOthers(now, c)
	rpm, tpm, otpm := b.limit(now, c, requestLimit), b.limit(now, c, tokenLimit), b.limit(now, c, outputLimit)
	if c.Pacing.Share == 0 || (rpm <= 0 && tpm <= 0 && otpm <= 0) || b.firstAttempts.secs == nil {
		return 1, requestLimit
	}
	secs, o, cut := c.Breaker.Window.Seconds(), b.others(now), b.cutNow(now, c)
	calls, parked := b.demand(now, c)
	retryRate := float64(int64(b.retries.sum(now))+o.retries) / secs
	f, which := 1.0, requestLimit
	if rpm > 0 {
		f = paceShare(c, rpm, calls+parked, retryRate, cut)
	}
	if d := b.tokenDemand; tpm > 0 && d != nil && calls > 0 {
		scale := b.tokenScale(now)
		first := scale * float64(int64(d.first.sum(now))+o.firstTokens) / secs
		retries := scale * float64(int64(d.retries.sum(now))+o.retryTokens) / secs
		// A parked call carries the tokens of an average call.
		if t := paceShare(c, tpm, first+parked*first/calls, retries, cut); t < f {
			f, which = t, tokenLimit
		}
	}
	// Output tokens are not known before a call ends: each call, first
	// attempt or retry, is counted at the fleet's average output a call
	// (admitting reserves it; the usage the responses report corrects it).
	// No average yet (no response reported its output): not paced on it.
	if avg := b.outputPerCall(now); otpm > 0 && avg > 0 {
		if t := paceShare(c, otpm, (calls+parked)*avg, retryRate*avg, cut); t < f {
			f, which = t, outputLimit
		}
	}
	b.bound = which
	return f, which
}

// demand is the first attempts a second the gates draw for: the calls
// arriving (over the breaker's window, every replica's), and the parked
// calls drawing again every ParkRecheck.
func (b *Bucket) demand(now time.Time, c *Config) (calls, parked float64) {
	secs := c.Breaker.Window.Seconds()
	calls = float64(int64(b.firstAttempts.sum(now))+b.others(now).firstAttempts) / secs
	return calls, float64(b.fleetParked(now)) / ParkRecheck.Seconds()
}

// paceShare is the share of a demand (units a second) that keeps the fleet
// at Share of a limit of perMinute, cut, after the retries' units.
func paceShare(c *Config, perMinute int64, demand, retries, cut float64) float64 {
	if demand <= 0 {
		return 1
	}
	room := c.Pacing.Share*float64(perMinute)/60*cut - retries
	// Bounded below: the fleet's room at the least cut, whatever the
	// retries. The retries of the calls a limit's onset throttled (on
	// tokens, the largest prompts, which meet a 429 first) filled a
	// window's room, and first attempts starved for the window's length
	// (tokens, three replicas, seed 9: none for 8 s, 88 % of the limit
	// used) with a tenth of that floor.
	room = max(room, MinCut*c.Pacing.Share*float64(perMinute)/60)
	return min(1, max(0, room/demand))
}

// tokenDemand is the input tokens the streams reported, per second over
// the breaker's window: of first attempts, and of retries; of the calls
// whose usage the clients read, the tokens the provider counted and the
// clients' estimates of them; and the output tokens the responses said
// they produced, and how many calls those were.
type tokenDemand struct{ first, retries, used, estimated, output, outputCalls ring }

// Token estimates are corrected by what the provider counted: the fleet's
// estimates are scaled by the tokens used over their estimates, once the
// calls with a usage estimated at least minCalibration tokens in the
// window, and by a factor of at most maxCalibration either way (an
// estimate off by more is a client's bug, not a tokenizer's).
const (
	minCalibration = 10_000
	maxCalibration = 4.0
)

// tokenScale is what the fleet's token estimates are multiplied by: the
// tokens the responses said were used over the estimates of those calls,
// every replica's, over the breaker's window (1 until enough are known).
func (b *Bucket) tokenScale(now time.Time) float64 {
	d := b.tokenDemand
	if d == nil {
		return 1
	}
	o := b.others(now)
	used, est := int64(d.used.sum(now))+o.usedTokens, int64(d.estimated.sum(now))+o.usedEstimates
	if est < minCalibration || used <= 0 {
		return 1
	}
	return min(maxCalibration, max(1/maxCalibration, float64(used)/float64(est)))
}

// addUsage counts what a report said the calls used, and their estimates.
func (b *Bucket) addUsage(now time.Time, c *BreakerConfig, used, estimated int64) {
	if used <= 0 || estimated <= 0 {
		return
	}
	d := b.tokenCounts(c)
	d.used.add(now, int(min(used, math.MaxInt32)))
	d.estimated.add(now, int(min(estimated, math.MaxInt32)))
}

// addOutput counts the output tokens a report said calls produced.
func (b *Bucket) addOutput(now time.Time, c *BreakerConfig, tokens, calls int64) {
	if tokens <= 0 || calls <= 0 {
		return
	}
	d := b.tokenCounts(c)
	d.output.add(now, int(min(tokens, math.MaxInt32)))
	d.outputCalls.add(now, int(min(calls, math.MaxInt32)))
}

// outputPerCall is the fleet's average output tokens a call: the output
// the responses reported over the calls that reported it, every
// replica's, over the breaker's window (0: none reported).
func (b *Bucket) outputPerCall(now time.Time) float64 {
	var tokens, calls int64
	if len(b.remote) > 0 {
		o := b.others(now)
		tokens, calls = o.outputTokens, o.outputCalls
	}
	if d := b.tokenDemand; d != nil {
		tokens, calls = tokens+int64(d.output.sum(now)), calls+int64(d.outputCalls.sum(now))
	}
	if tokens <= 0 || calls <= 0 {
		return 0
	}
	return float64(tokens) / float64(calls)
}

// addTokens counts the input tokens a report carried.
func (b *Bucket) addTokens(now time.Time, c *BreakerConfig, first, retries int64) {
	if first <= 0 && retries <= 0 {
		return
	}
	d := b.tokenCounts(c)
	d.first.add(now, int(min(first, math.MaxInt32)))
	d.retries.add(now, int(min(retries, math.MaxInt32)))
}

// tokenCounts returns b's token counts, made at the first report that carries
// tokens (input or output).
func (b *Bucket) tokenCounts(c *BreakerConfig) *tokenDemand {
	if b.tokenDemand == nil {
		rs := newRings(c.Window, 6)
		b.tokenDemand = &tokenDemand{first: rs[0], retries: rs[1], used: rs[2], estimated: rs[3], output: rs[4], outputCalls: rs[5]}
	}
	return b.tokenDemand
}

// throttled cuts the paced share (CutFactor, at most every cutEvery, not
// below MinCut) when a paced bucket still gets 429s; it rises again by
// RisePerSecond, or OutputRisePerSecond when the output-token limit bound
// the pace (pace.go). The demand and retries pacing divides by are
// averages over the window: they lag a sudden quota, and the 429s tell at
// once (measured in the simulation's quota scenario: most 429s came in the
// first seconds).
func (b *Bucket) throttled(now time.Time, c *Config, client string) {
	if !b.limitsKnown() || now.Sub(b.cutAt) < cutEvery {
		return
	}
	b.cut, b.cutAt, b.cutRise = max(MinCut, CutFactor*b.cutNow(now, c)), now, riseAfterCut(b.bound)
	b.paceCuts++
	if now.Sub(b.paceNoteAt) >= time.Second {
		b.notePace(now, client, fmt.Sprintf("pace cut after a 429: %d %% of the limit's share (cuts: %d)", int(100*b.cut+0.5), b.paceCuts), b.paceCuts, c)
		b.paceCuts, b.paceNoteAt = 0, now
	}
}

// cutNow is the pace's share of the learnt limit's Share: 1 until a 429,
// then cut and rising, up to the whole limit.
func (b *Bucket) cutNow(now time.Time, c *Config) float64 {
	if b.cutAt.IsZero() {
		return 1
	}
	top := 1.0
	if c.Pacing.Share > 0 {
		top = 1 / c.Pacing.Share
	}
	return min(top, b.cut+b.cutRise*now.Sub(b.cutAt).Seconds())
}

func typeName(t policydv1.FailureType) string { return enums.Short(t) }
