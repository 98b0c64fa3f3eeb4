package fakeprovider

import (
	"math"
	"time"
)

// bucket is one rate limit as a token bucket: it holds up to limit units
// and refills at limit per minute, continuously. That is how Anthropic
// documents its limits ("your capacity is continuously replenished up to
// your maximum limit, rather than being reset at fixed intervals": the
// Messages API's rate-limits page); OpenAI's headers fit it as well (a
// remaining count, and the time until the limit is back to its initial
// state).
type bucket struct {
	limit float64 // units a minute; 0: no limit
	level float64 // units available at at
	at    time.Time
}

func newBucket(limit int64, now time.Time) *bucket {
	return &bucket{limit: float64(limit), level: float64(limit), at: now}
}

// refill brings the level to now.
func (b *bucket) refill(now time.Time) {
	if b.limit == 0 {
		return
	}
	if dt := now.Sub(b.at); dt > 0 {
		b.level = math.Min(b.limit, b.level+b.limit*dt.Minutes())
		b.at = now
	}
}

// fits says whether n units are available now.
func (b *bucket) fits(n float64) bool { return b.limit == 0 || b.level >= n }

// take removes n units (the level may go below zero: a response that used
// more than its estimate).
func (b *bucket) take(n float64) {
	if b.limit > 0 {
		b.level -= n
	}
}

// remaining is the whole units left now.
func (b *bucket) remaining() int64 { return max(0, int64(b.level)) }

// wait is how long until n units are available (0: now).
func (b *bucket) wait(n float64) time.Duration {
	if b.limit == 0 || b.level >= n {
		return 0
	}
	return time.Duration((n - b.level) / b.limit * float64(time.Minute))
}

// reset is how long until the bucket is full again.
func (b *bucket) reset() time.Duration { return b.wait(b.limit) }
