package fleet

import (
	"sort"
	"time"
)

// remoteCounts is another replica's latest counts of a bucket.
type remoteCounts struct {
	at time.Time
	Counts
}

// fleetCounts are the other replicas' fresh counts of b, summed.
type fleetCounts struct {
	failures, successes, admitted, firstAttempts, retries, asks, probeOK int64
	rpm, tpm, otpm, firstTokens, retryTokens, parked                     int64
	recentFailures, recentSuccesses, usedTokens, usedEstimates           int64
	outputTokens, outputCalls                                            int64
	replicas                                                             int // others with fresh counts
	streamed                                                             bool
}

func (b *Bucket) others(now time.Time) fleetCounts {
	var fc fleetCounts
	for _, r := range b.remote {
		if now.Sub(r.at) > staleAfter {
			continue
		}
		fc.replicas++
		if r.Version == b.version {
			// The breaker's counts restart at each transition: another
			// replica's from before the last one (it has not taken it yet)
			// would re-open a breaker that just closed.
			fc.failures += r.Failures
			fc.successes += r.Successes
			fc.recentFailures += r.RecentFailures
			fc.recentSuccesses += r.RecentSuccesses
		}
		fc.admitted += r.Admitted
		fc.firstAttempts += r.FirstAttempts
		fc.retries += r.Retries
		fc.asks += r.Asks
		if r.Version == b.version && b.state == HalfOpen {
			fc.probeOK += r.ProbeOK
		}
		fc.streamed = fc.streamed || r.Streamed
		fc.rpm = max(fc.rpm, r.RequestsPerMinute)
		fc.tpm = max(fc.tpm, r.InputTokensPerMinute)
		fc.otpm = max(fc.otpm, r.OutputTokensPerMinute)
		fc.firstTokens += r.FirstAttemptTokens
		fc.retryTokens += r.RetryTokens
		fc.parked += r.Parked
		fc.usedTokens += r.UsedTokens
		fc.usedEstimates += r.UsedEstimates
		fc.outputTokens += r.OutputTokens
		fc.outputCalls += r.OutputCalls
	}
	return fc
}

// otherClients counts the failing clients other replicas name that b's own
// window does not have.
func (b *Bucket) otherClients(now time.Time, window time.Duration) int {
	seen := map[string]bool{}
	for _, r := range b.remote {
		if now.Sub(r.at) > staleAfter {
			continue
		}
		if r.Version != b.version {
			continue
		}
		for _, id := range r.Clients {
			if at, ok := b.clients[id]; ok && now.Sub(at) < window {
				continue
			}
			seen[id] = true
		}
	}
	return len(seen)
}

// share is this replica's part of the bucket's retry budget: its share of
// the retries the replicas were asked for over the window, an even split
// among the replicas active on the bucket while nobody asked for any. Its
// own asks are taken as last published, like the others': counted live,
// a replica's own would outweigh the others' (a second old) and the shares
// would add up to more than the whole.
func (b *Bucket) share(now time.Time) float64 {
	if len(b.remote) == 0 {
		return 1
	}
	o := b.others(now)
	own := b.asksPublished
	if total := own + o.asks; total > 0 {
		// At least a small share: a replica whose first retry comes after a
		// quiet window still gets some budget until its asks count.
		return max(float64(own)/float64(total), 1/float64(4*(o.replicas+1)))
	}
	return 1 / float64(o.replicas+1)
}

// ownCounts are b's counts of this replica's own over the window, and
// false when it has none to share.
func (b *Bucket) ownCounts(now time.Time, c *Config) (Counts, bool) {
	if b.window.secs == nil {
		return Counts{}, false
	}
	bc := Counts{Key: b.key, Failures: int64(b.window.sum(now)), Successes: int64(b.successes.sum(now)),
		Admitted: int64(b.admitted.sum(now)), FirstAttempts: int64(b.firstAttempts.sum(now)), Retries: int64(b.retries.sum(now)),
		Streamed: b.streamedHere(now, &c.Breaker), RequestsPerMinute: b.limit(now, c, requestLimit),
		InputTokensPerMinute: b.limit(now, c, tokenLimit), OutputTokensPerMinute: b.limit(now, c, outputLimit), Parked: b.parkedTotal()}
	if secs := int(c.Breaker.TripWindow / time.Second); secs > 0 {
		bc.RecentFailures, bc.RecentSuccesses = int64(b.window.sumLast(now, secs)), int64(b.successes.sumLast(now, secs))
	}
	b.limitsShared = b.limitsPerMinute()
	if d := b.tokenDemand; d != nil {
		bc.FirstAttemptTokens, bc.RetryTokens = int64(d.first.sum(now)), int64(d.retries.sum(now))
		bc.UsedTokens, bc.UsedEstimates = int64(d.used.sum(now)), int64(d.estimated.sum(now))
		bc.OutputTokens, bc.OutputCalls = int64(d.output.sum(now)), int64(d.outputCalls.sum(now))
	}
	if b.asks.secs != nil {
		bc.Asks = int64(b.asks.sum(now))
		b.asksPublished = bc.Asks
	}
	bc.Version = b.version
	if b.state == HalfOpen {
		bc.ProbeOK = int64(b.probeOK)
	}
	b.probeOKShared = b.probeOK
	for id, at := range b.clients {
		if now.Sub(at) < c.Breaker.Window && len(bc.Clients) < maxSharedClients {
			bc.Clients = append(bc.Clients, id)
		}
	}
	sort.Strings(bc.Clients)
	if bc.Failures+bc.Successes+bc.FirstAttempts+bc.Retries+bc.Asks+bc.ProbeOK+bc.Parked == 0 && !bc.Streamed {
		return Counts{}, false
	}
	return bc, true
}
