package fleet

import (
	"fmt"
	"time"
)

// Pacing learnt limits: the gates admit the share of first attempts that
// keeps the fleet at Share of the provider's request limit, of its
// input-token limit and of its output-token limit, whichever binds (pace
// in bucket.go; input tokens by the clients' estimates of each call's
// input, output tokens by the output the fleet's calls produced). A limit is learnt from
// rate-limit headers and is only an estimate, so it is held loosely:
//   - it cuts a pace only when corroborated: carried by a 429, or reported
//     by more than one client (one client's stale or foreign header does
//     not throttle the fleet);
//   - it expires LimitTTL after the last header or 429 that carried it,
//     once successes come without it, so a limit that lifts is forgotten
//     within seconds (and a pace that starved its clients of successes
//     does not end for want of headers);
//   - the share it gives moves as TCP's congestion window and the AWS
//     SDKs' adaptive retry mode do (additive increase, multiplicative
//     decrease): cut by CutFactor on a 429, raised by RisePerSecond of the
//     limit each second without one (half that while the output-token
//     limit binds), up to the whole limit, never below MinCut;
//   - a success whose headers say more than half the limit is left lifts
//     a cut at once (followRemaining).

// LimitTTL is how long a learnt limit lasts without a header or a
// 429 that carries it again (while successes come without it). Shorter
// recovers sooner after a limit lifts: in the simulation (quota, seeds
// 1–10) 3 s against 5 s took recovery from 5–7 s to 3–7 s and the calls
// completed from 0.981–0.994 to 0.983–0.995 of the best baseline's (with
// 2,000 agents 0.977 → 0.986); a limit that providers carry on every
// response is refreshed far more often than that.
const LimitTTL = 3 * time.Second

// The pace's AIMD: a 429 cuts the share to CutFactor of itself (at most
// every cutEvery, never below MinCut); each second without one raises it
// by RisePerSecond, up to the limit itself (1 / Share of the paced share).
//
// OutputRisePerSecond is the rise after a cut while the output-token limit
// bound the pace: a call's output is known only when it ends, so each is
// counted at the fleet's average (of 100 to 10,000 tokens, in the
// simulation) and an overdraw shows seconds later; the pace probes for
// the limit half as fast. Measured (output, seeds 1–10, life inf): with
// three replicas 1.0–1.6 % of attempts 429s and 96–99 % of the limit used,
// against 1.2–2.7 % and 97–99 % at RisePerSecond; with one, 0.2–0.6 %
// against 0.2–1.0 %.
const (
	CutFactor           = 0.9
	MinCut              = 0.3
	RisePerSecond       = 0.02
	OutputRisePerSecond = 0.01
	cutEvery            = 200 * time.Millisecond
)

// StartCutOn429 is where a pace begins, as a share of Share of the limit,
// when a 429 that carries a token limit (input or output) started it: the
// fleet is already over the limit, and the demand the pace divides by is a
// window's average of calls whose size varies a hundredfold, so it lags
// the calls parked since. A pace that a request limit, or two clients'
// headers, started begins at Share. Measured over seeds 1–10, both
// lifetimes, against starting at Share: tokens with three replicas
// 0.4–1.9 % of attempts 429s (0.6–2.3 %), with one 0.1–0.6 % (0.1–1.7 %);
// output with three 0.6–1.4 % (1.0–1.6 %), with one 0.1–0.6 %; 92–100 %
// of the limits used.
// Started so on a request limit's 429 too (at 0.85), it cost the quota
// scenario calls (three replicas, seed 9: 0.960 of the best baseline's,
// against 0.986) and its busiest second after the limit lifted (seed 13:
// 2.14 ×, against 1.77 ×).
const StartCutOn429 = 0.7

// startCut begins the pace that a 429 carrying a token limit just started
// at StartCutOn429 (record calls it).
func (b *Bucket) startCut() { b.cut = StartCutOn429 }

// riseAfterCut is the pace's rise a second after a cut while bound binds.
func riseAfterCut(bound int) float64 {
	if bound == outputLimit {
		return OutputRisePerSecond
	}
	return RisePerSecond
}

// ParkRecheck is how often a client's gate draws again for a call parked
// by a pace (refgate.Recheck): the daemon counts each parked call as that
// much demand.
const ParkRecheck = time.Second

// learntLimit is one of a provider's limits as its headers give it, per
// minute: requests, input tokens or output tokens. It is held loosely (the rules above).
type learntLimit struct {
	perMinute int64
	at        time.Time // when a header or a 429 last carried it
	// headerless is when a report last counted successes whose headers did
	// not carry the limit: the evidence that it lifted (limit).
	headerless time.Time
	by         string // the client that reported it first
	confirmed  bool   // carried by a 429 or reported by a second client
	expiredAt  time.Time
}

// The limits a bucket paces on.
const (
	requestLimit = iota
	tokenLimit
	outputLimit
	limitKinds // how many
)

// limitUnits names what each limit counts, for reasons and events;
// limitNames as GetBucket's views name it.
var (
	limitUnits = [limitKinds]string{requestLimit: "requests", tokenLimit: "input tokens", outputLimit: "output tokens"}
	limitNames = [limitKinds]string{requestLimit: "requests", tokenLimit: "input_tokens", outputLimit: "output_tokens"}
)

// learn records a limit from client's headers (or a 429's, which
// corroborates it at once), and says whether it starts to pace.
func (l *learntLimit) learn(now time.Time, perMinute int64, client string, on429 bool) bool {
	if perMinute != l.perMinute {
		l.confirmed, l.by = false, client
	}
	l.perMinute, l.at = perMinute, now
	if !l.confirmed && (on429 || (l.by != "" && client != l.by)) {
		l.confirmed = true
		return true
	}
	return false
}

// noteHeaderless records that a report counted successes whose headers
// did not carry the limits it names 0 (perMinute, by limit).
func (b *Bucket) noteHeaderless(now time.Time, succeeded int64, perMinute [limitKinds]int64) {
	if succeeded <= 0 {
		return
	}
	for which, n := range perMinute {
		if n <= 0 {
			b.limits[which].headerless = now
		}
	}
}

// learnLimit records limit which (requestLimit, tokenLimit, outputLimit) of perMinute
// from client's headers, or a 429's.
func (b *Bucket) learnLimit(now time.Time, c *Config, which int, perMinute int64, client string, on429 bool) {
	if perMinute <= 0 {
		return
	}
	wasPacing := b.pacing()
	if !b.limits[which].learn(now, perMinute, client, on429) {
		return
	}
	if !wasPacing {
		// The pace starts at Share of the limit (or lower: startCut) and
		// rises while no 429 comes.
		b.cut, b.cutAt, b.cutRise = 1, now, RisePerSecond
		b.noteBaseRate(now, &c.Breaker)
	}
	how := "reported by a second client"
	switch {
	case client == "":
		how = "reported by another replica's clients"
	case on429:
		how = "carried by a 429"
	}
	if which == outputLimit && b.outputPerCall(now) == 0 {
		how += "; not paced until a response reports the output its call produced"
	}
	b.notePace(now, client, fmt.Sprintf("pacing starts: a limit of %d %s a minute, %s", perMinute, limitUnits[which], how), 0, c)
}

// pacing says whether a corroborated limit paces the bucket.
func (b *Bucket) pacing() bool {
	for _, l := range b.limits {
		if l.confirmed {
			return true
		}
	}
	return false
}

// limitsKnown says whether b has learnt any limit, corroborated or not.
func (b *Bucket) limitsKnown() bool {
	for _, l := range b.limits {
		if l.perMinute > 0 {
			return true
		}
	}
	return false
}

// limitsPerMinute are b's learnt limits, as last shared with the other
// replicas (replica.go: a new one is urgent).
func (b *Bucket) limitsPerMinute() [limitKinds]int64 {
	var out [limitKinds]int64
	for i, l := range b.limits {
		out[i] = l.perMinute
	}
	return out
}

// notePace keeps a pace change for the next publish (publishPace): the
// pace moves inside reads and decisions that have no event list at hand.
func (b *Bucket) notePace(now time.Time, client, why string, cuts int64, c *Config) {
	if len(b.paceNotes) >= 4 { // a bucket's notes are published within a tick
		return
	}
	counts := map[string]int64{"share_pct": int64(100*c.Pacing.Share*b.cutNow(now, c) + 0.5)}
	if n := b.limits[requestLimit].perMinute; n > 0 {
		counts["rpm"] = n
	}
	if n := b.limits[tokenLimit].perMinute; n > 0 {
		counts["tpm"] = n
	}
	if n := b.limits[outputLimit].perMinute; n > 0 {
		counts["otpm"] = n
	}
	if cuts > 0 {
		counts["cuts"] = cuts
	}
	b.paceNotes = append(b.paceNotes, Event{At: now, Key: b.key, Kind: EventPace, ClientID: client, Reason: why, Counts: counts})
}

// publishPace hands the pace changes noted since the last call to emit.
func (b *Bucket) publishPace(emit func(Event)) {
	for _, e := range b.paceNotes {
		emit(e)
	}
	b.paceNotes = b.paceNotes[:0]
}

// fromOthers takes the limits another replica's streams reported, unless
// this replica let one expire within LimitTTL (the replicas would hand an
// expired limit back and forth, never letting it go).
func (b *Bucket) fromOthers(now time.Time, c *Config) {
	if len(b.remote) == 0 {
		return
	}
	o := b.others(now)
	for which, theirs := range [limitKinds]int64{requestLimit: o.rpm, tokenLimit: o.tpm, outputLimit: o.otpm} {
		l := &b.limits[which]
		if theirs > 0 && l.perMinute == 0 && (l.expiredAt.IsZero() || now.Sub(l.expiredAt) > LimitTTL) {
			b.learnLimit(now, c, which, theirs, "", true)
		}
	}
}

// limit is the learnt limit which that paces now (0: none): corroborated
// and not expired.
func (b *Bucket) limit(now time.Time, c *Config, which int) int64 {
	l := &b.limits[which]
	// A limit ends when no header or 429 carried it for LimitTTL while
	// successes came without it. Without successes at all, the pace's own
	// parked calls may be why no header came: a starved replica must not
	// end its pace and release its backlog into the limit.
	if l.perMinute > 0 && !l.at.IsZero() && now.Sub(l.at) > LimitTTL && l.headerless.After(l.at) {
		ended := l.confirmed
		if ended {
			b.notePace(now, "", fmt.Sprintf("pacing on %s ends: no header or 429 carried the limit for %v", limitUnits[which], LimitTTL), 0, c)
		}
		*l = learntLimit{expiredAt: now}
		if ended && !b.pacing() {
			b.cutAt = time.Time{}
			b.startRelease(now, PaceReleaseFactor, true) // the calls the pace parked leave in slots, not at once
		}
	}
	if !l.confirmed {
		return 0
	}
	return l.perMinute
}

// limitLeft is what the last headers that said so said is left of a
// limit, and when it is whole again.
type limitLeft struct {
	remaining int64 // -1: unknown
	resetAt   time.Time
	at        time.Time
}

// noteLeft keeps what a response's headers said is left of the limits.
func (b *Bucket) noteLeft(now time.Time, left [limitKinds]LimitLeft) {
	for i, l := range left {
		if l.Remaining < 0 {
			continue
		}
		b.left[i] = limitLeft{remaining: l.Remaining, at: now}
		if l.Reset > 0 {
			b.left[i].resetAt = now.Add(l.Reset)
		}
	}
}

// LimitView is one of a provider's limits as a bucket knows it.
type LimitView struct {
	// Name is "requests", "input_tokens" or "output_tokens".
	Name string
	// PerMinute is the learnt limit (0: none learnt or expired); Pacing
	// whether it paces now.
	PerMinute int64
	Pacing    bool
	// Remaining is what the last headers said is left (-1: unknown), Seen
	// how long ago, and ResetIn how long until the limit is whole again
	// by them (0: unknown or past).
	Remaining     int64
	Seen, ResetIn time.Duration
}

// limitViews are b's limits, those it knows anything of.
func (b *Bucket) limitViews(now time.Time) []LimitView {
	var out []LimitView
	for i, name := range limitNames {
		l, left := b.limits[i], b.left[i]
		if l.perMinute == 0 && left.at.IsZero() {
			continue
		}
		v := LimitView{Name: name, PerMinute: l.perMinute, Pacing: l.confirmed, Remaining: -1}
		if !left.at.IsZero() {
			v.Remaining, v.Seen = left.remaining, now.Sub(left.at)
			if left.resetAt.After(now) {
				v.ResetIn = left.resetAt.Sub(now)
			}
		}
		out = append(out, v)
	}
	return out
}

// expireLimits ends the limits no header carried for LimitTTL.
func (b *Bucket) expireLimits(now time.Time, c *Config) {
	for which := range limitKinds {
		b.limit(now, c, which)
	}
}

// followRemaining takes what a success's headers say is left of the
// limits: more than half of each left means no limit binds the fleet now,
// and a pace cut by 429s goes back to the limits' whole share at once
// instead of rising a step a second.
func (b *Bucket) followRemaining(now time.Time, c *Config, share float64) {
	if share <= 0.5 || b.cutAt.IsZero() || !b.pacing() {
		return
	}
	top := 1.0
	if c.Pacing.Share > 0 {
		top = 1 / c.Pacing.Share
	}
	lifted := b.cutNow(now, c) < top
	b.cut, b.cutAt, b.cutRise = top, now, RisePerSecond
	if lifted {
		b.notePace(now, "", fmt.Sprintf("pace lifted to the limit's whole share: a success's headers say %d %% of it is left", int(100*share+0.5)), 0, c)
	}
}

// paceWhy says how the pace stands, for the assignment's reason: the
// limit that binds (which). Every stream asks for it four times a second:
// the text is kept until what it says changes.
func (b *Bucket) paceWhy(now time.Time, c *Config, share float64, which int) string {
	l := &b.limits[which]
	seen, cut := now.Sub(l.at).Round(time.Second), time.Duration(-1)
	if !b.cutAt.IsZero() {
		cut = now.Sub(b.cutAt).Round(time.Second)
	}
	var reset time.Duration
	if at := b.left[which].resetAt; at.After(now) {
		reset = at.Sub(now).Round(time.Second)
	}
	key := paceWhyKey{which: which, perMinute: l.perMinute, seen: seen, cut: cut, reset: reset,
		share: int(100*share + 0.5), cutShare: int(100*b.cutNow(now, c) + 0.5)}
	switch which {
	case tokenLimit:
		key.scale = int(100*b.tokenScale(now) + 0.5)
	case outputLimit:
		key.perCall = int64(b.outputPerCall(now) + 0.5)
	}
	if o := &b.limits[outputLimit]; which != outputLimit && o.confirmed && b.outputPerCall(now) == 0 {
		key.outputUnpaced = o.perMinute
	}
	if key == b.paceWhyKey && b.paceWhyText != "" {
		return b.paceWhyText
	}
	why := fmt.Sprintf("pacing a limit of %d %s a minute (last seen %v ago): %d %% of first attempts", key.perMinute, limitUnits[which], seen, key.share)
	if cut >= 0 {
		why += fmt.Sprintf(", at %d %% of the limit's share after a 429 %v ago", key.cutShare, cut)
	}
	if key.scale != 0 && key.scale != 100 {
		why += fmt.Sprintf("; the clients' token estimates × %.2f, by the usage the responses reported", float64(key.scale)/100)
	}
	if key.perCall > 0 {
		why += fmt.Sprintf("; each call counted at %d output tokens, the fleet's average by the usage the responses reported", key.perCall)
	}
	if key.outputUnpaced > 0 {
		why += fmt.Sprintf("; the output-token limit of %d a minute is not paced: no response reported its output yet", key.outputUnpaced)
	}
	if reset > 0 {
		why += fmt.Sprintf("; the provider says it is whole again in %v", reset)
	}
	b.paceWhyKey, b.paceWhyText = key, why
	return why
}

// paceWhyKey is what a pace's reason says.
type paceWhyKey struct {
	which            int
	perMinute        int64
	seen, cut, reset time.Duration
	share, cutShare  int
	scale            int   // the token estimates' correction, in percent (0: not the token limit)
	perCall          int64 // the output tokens a call is counted at (0: not the output limit)
	outputUnpaced    int64 // an output-token limit learnt but not paced: no output reported
}
