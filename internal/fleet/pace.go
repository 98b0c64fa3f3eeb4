package fleet

import (
	"fmt"
	"time"
)

// Pacing a learnt request limit: the gates admit the share of first
// attempts that keeps the fleet at Share of the provider's limit (pace in
// bucket.go). The limit is learnt from rate-limit headers and is only an
// estimate, so it is held loosely:
//   - it cuts a pace only when corroborated: carried by a 429, or reported
//     by more than one client (one client's stale or foreign header does
//     not throttle the fleet);
//   - it expires LimitTTL after the last header or 429 that carried it,
//     so a limit that lifts is forgotten within seconds;
//   - the share it gives moves as TCP's congestion window and the AWS
//     SDKs' adaptive retry mode do (additive increase, multiplicative
//     decrease): cut by CutFactor on a 429, raised by RisePerSecond of the
//     limit each second without one, up to the whole limit, never below
//     MinCut;
//   - a success whose headers say more than half the limit is left lifts
//     a cut at once (followRemaining).

// LimitTTL is how long a learnt request limit lasts without a header or a
// 429 that carries it again.
const LimitTTL = 5 * time.Second

// The pace's AIMD: a 429 cuts the share to CutFactor of itself (at most
// every cutEvery, never below MinCut); each second without one raises it
// by RisePerSecond, up to the limit itself (1 / Share of the paced share).
const (
	CutFactor     = 0.9
	MinCut        = 0.3
	RisePerSecond = 0.02
	cutEvery      = 200 * time.Millisecond
)

// ParkRecheck is how often a client's gate draws again for a call parked
// by a pace (refgate.Recheck): the daemon counts each parked call as that
// much demand.
const ParkRecheck = time.Second

// learnLimit records a request limit rpm from client's headers (or a 429's,
// which corroborates it at once).
func (b *Bucket) learnLimit(now time.Time, c *Config, rpm int64, client string, on429 bool) {
	if rpm <= 0 {
		return
	}
	if rpm != b.rpm {
		b.rpmConfirmed, b.rpmBy = false, client
	}
	b.rpm, b.rpmAt = rpm, now
	if !b.rpmConfirmed && (on429 || (b.rpmBy != "" && client != b.rpmBy)) {
		// The pace starts at Share of the limit and rises while no 429 comes.
		b.rpmConfirmed, b.cut, b.cutAt = true, 1, now
		b.noteBaseRate(now, &c.Breaker)
		how := "reported by a second client"
		switch {
		case client == "":
			how = "reported by another replica's clients"
		case on429:
			how = "carried by a 429"
		}
		b.notePace(now, client, fmt.Sprintf("pacing starts: a limit of %d requests a minute, %s", rpm, how), 0, c)
	}
}

// notePace keeps a pace change for the next publish (publishPace): the
// pace moves inside reads and decisions that have no event list at hand.
func (b *Bucket) notePace(now time.Time, client, why string, cuts int64, c *Config) {
	if len(b.paceNotes) >= 4 { // a bucket's notes are published within a tick
		return
	}
	counts := map[string]int64{"rpm": b.rpm, "share_pct": int64(100*c.Pacing.Share*b.cutNow(now, c) + 0.5)}
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

// fromOthers takes the limit another replica's streams reported, unless
// this replica let it expire within LimitTTL (the replicas would hand an
// expired limit back and forth, never letting it go).
func (b *Bucket) fromOthers(now time.Time, c *Config) {
	if b.rpm > 0 || len(b.remote) == 0 || (!b.rpmExpiredAt.IsZero() && now.Sub(b.rpmExpiredAt) <= LimitTTL) {
		return
	}
	if r := b.others(now).rpm; r > 0 {
		b.learnLimit(now, c, r, "", true)
	}
}

// limit is the learnt request limit that paces now (0: none): corroborated
// and not expired.
func (b *Bucket) limit(now time.Time, c *Config) int64 {
	if b.rpm > 0 && !b.rpmAt.IsZero() && now.Sub(b.rpmAt) > LimitTTL {
		if b.rpmConfirmed {
			b.startRelease(now) // the calls the pace parked leave in slots, not at once
			b.notePace(now, "", fmt.Sprintf("pacing ends: no header or 429 carried the limit for %v", LimitTTL), 0, c)
		}
		b.rpm, b.rpmConfirmed, b.cutAt, b.rpmExpiredAt = 0, false, time.Time{}, now
	}
	if !b.rpmConfirmed {
		return 0
	}
	return b.rpm
}

// followRemaining takes what a success's headers say is left of the limit:
// more than half of it left means the limit is not what binds the fleet
// now, and a pace cut by 429s goes back to the limit's whole share at once
// instead of rising a step a second.
func (b *Bucket) followRemaining(now time.Time, c *Config, share float64) {
	if share <= 0.5 || b.cutAt.IsZero() || !b.rpmConfirmed {
		return
	}
	top := 1.0
	if c.Pacing.Share > 0 {
		top = 1 / c.Pacing.Share
	}
	lifted := b.cutNow(now, c) < top
	b.cut, b.cutAt = top, now
	if lifted {
		b.notePace(now, "", fmt.Sprintf("pace lifted to the limit's whole share: a success's headers say %d %% of it is left", int(100*share+0.5)), 0, c)
	}
}

// paceWhy says how the pace stands, for the assignment's reason. Every
// stream asks for it four times a second: the text is kept until what it
// says changes.
func (b *Bucket) paceWhy(now time.Time, c *Config, share float64) string {
	seen, cut := now.Sub(b.rpmAt).Round(time.Second), time.Duration(-1)
	if !b.cutAt.IsZero() {
		cut = now.Sub(b.cutAt).Round(time.Second)
	}
	key := paceWhyKey{rpm: b.rpm, seen: seen, cut: cut, share: int(100*share + 0.5), cutShare: int(100*b.cutNow(now, c) + 0.5)}
	if key == b.paceWhyKey && b.paceWhyText != "" {
		return b.paceWhyText
	}
	why := fmt.Sprintf("pacing a limit of %d requests a minute (last seen %v ago): %d %% of first attempts", key.rpm, seen, key.share)
	if cut >= 0 {
		why += fmt.Sprintf(", at %d %% of the limit's share after a 429 %v ago", key.cutShare, cut)
	}
	b.paceWhyKey, b.paceWhyText = key, why
	return why
}

// paceWhyKey is what a pace's reason says.
type paceWhyKey struct {
	rpm             int64
	seen, cut       time.Duration
	share, cutShare int
}
