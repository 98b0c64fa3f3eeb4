package fleet

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

// A learnt request limit paces only when corroborated, expires, and moves
// by AIMD; every pace says why.
func TestPaceLearntLimit(t *testing.T) {
	t.Parallel()
	rpm := int64(600) // 10/s
	report := func(f *Fleet, client string, limit int64) {
		f.Report(Usage{Target: streamTarget, ClientID: client, Admitted: 100, RequestsPerMinute: limit}) // 10/s each
	}
	tests := []struct {
		name string
		run  func(f *Fleet, clk *fakeClock)
		// want: the admit fraction, within 0.01; why: in the reason
		want float64
		why  string
	}{
		{name: "one client's header alone does not pace", want: 1,
			run: func(f *Fleet, _ *fakeClock) { report(f, "a", rpm); report(f, "a", rpm) }},
		{name: "a second client corroborates", want: 0.93 * 10 / 20, why: "pacing a limit of 600 requests a minute",
			run: func(f *Fleet, _ *fakeClock) { report(f, "a", rpm); report(f, "b", rpm) }},
		{name: "a 429 corroborates", want: 0.93 * 10 / 10, why: "pacing a limit of 600",
			run: func(f *Fleet, _ *fakeClock) {
				report(f, "a", 0)
				a := ask("a", rateLimit, time.Second)
				a.RequestsPerMinute = rpm
				f.Decide(a)
			}},
		{name: "the limit expires once successes come without it", want: 1,
			run: func(f *Fleet, clk *fakeClock) {
				report(f, "a", rpm)
				report(f, "b", rpm)
				clk.advance(LimitTTL + time.Second)
				f.Report(Usage{Target: streamTarget, ClientID: "a", Admitted: 100, Succeeded: 100})
			}},
		{name: "with no success at all, a limit no header carried is held", want: 10.0 / 30, why: "pacing a limit of 600", // risen to the whole limit, 30 calls a second
			run: func(f *Fleet, clk *fakeClock) {
				report(f, "a", rpm)
				report(f, "b", rpm)
				clk.advance(LimitTTL + time.Second)
				report(f, "a", 0)
			}},
		{name: "a 429 cuts the pace, multiplicatively", want: 0.93 * 10 / 20 * CutFactor, why: "after a 429",
			run: func(f *Fleet, clk *fakeClock) {
				report(f, "a", rpm)
				report(f, "b", rpm)
				clk.advance(time.Second)
				a := ask("a", rateLimit, time.Second)
				a.RequestsPerMinute = rpm
				f.Decide(a)
			}},
		{name: "a success with more than half the limit left lifts a cut at once", want: 10.0 / 20, why: "pacing",
			run: func(f *Fleet, clk *fakeClock) {
				report(f, "a", rpm)
				report(f, "b", rpm)
				clk.advance(time.Second)
				a := ask("a", rateLimit, time.Second)
				a.RequestsPerMinute = rpm
				f.Decide(a)
				f.Report(Usage{Target: streamTarget, ClientID: "a", RequestsPerMinute: rpm, RemainingShare: 0.8})
			}},
		{name: "retries that fill the room leave first attempts the room at the least cut", want: MinCut * 0.93 * 10 / 20, why: "pacing",
			run: func(f *Fleet, _ *fakeClock) {
				report(f, "a", rpm)
				f.Report(Usage{Target: streamTarget, ClientID: "b", Admitted: 100, Retries: 200, RequestsPerMinute: rpm}) // 20 retries a second
			}},
		{name: "without a 429 the pace rises, additively, to the whole limit", want: 10.0 / 20, why: "pacing",
			run: func(f *Fleet, clk *fakeClock) {
				report(f, "a", rpm)
				report(f, "b", rpm)
				for range 9 { // 9 s: the rise passes the limit's share; refreshed, the limit stays
					clk.advance(time.Second)
					f.Report(Usage{Target: streamTarget, ClientID: "a", RequestsPerMinute: rpm})
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, clk, _ := newTestFleet(t, nil)
			tt.run(f, clk)
			a := f.Assign(streamTarget, "a")
			if a.AdmitFraction < tt.want-0.01 || a.AdmitFraction > tt.want+0.01 || !strings.Contains(a.Reason, tt.why) {
				t.Fatalf("assignment %+v, want a fraction about %.3f and a reason with %q", a, tt.want, tt.why)
			}
		})
	}
}

// Every pace change is an event that says why: start, cuts (at most one
// event a second, counting the cuts it covers), lift and end.
func TestPaceChangesAreEvents(t *testing.T) {
	t.Parallel()
	f, clk, rec := newTestFleet(t, nil)
	rpm := int64(600)
	f.Report(Usage{Target: streamTarget, ClientID: "a", Admitted: 100, RequestsPerMinute: rpm})
	f.Report(Usage{Target: streamTarget, ClientID: "b", Admitted: 100, RequestsPerMinute: rpm})
	throttle := func() {
		a := ask("a", rateLimit, time.Second)
		a.RequestsPerMinute = rpm
		f.Decide(a)
	}
	clk.advance(time.Second)
	throttle() // cut, an event
	clk.advance(300 * time.Millisecond)
	throttle() // cut, within the second: no event
	clk.advance(800 * time.Millisecond)
	throttle() // cut, an event for two cuts
	f.Report(Usage{Target: streamTarget, ClientID: "b", RequestsPerMinute: rpm, RemainingShare: 0.8})
	clk.advance(LimitTTL + time.Second)
	f.Report(Usage{Target: streamTarget, ClientID: "b", Succeeded: 1}) // a success without the header
	f.Tick()

	type want struct {
		client, why string
		counts      map[string]int64
	}
	wants := []want{
		{"b", "pacing starts: a limit of 600 requests a minute, reported by a second client", map[string]int64{"rpm": 600, "share_pct": 93}},
		{"a", "pace cut after a 429: 92 % of the limit's share (cuts: 1)", map[string]int64{"rpm": 600, "share_pct": 85, "cuts": 1}},
		{"a", "pace cut after a 429: 76 % of the limit's share (cuts: 2)", map[string]int64{"rpm": 600, "share_pct": 71, "cuts": 2}},
		{"", "pace lifted to the limit's whole share: a success's headers say 80 % of it is left", map[string]int64{"rpm": 600, "share_pct": 100}},
		{"", "pacing on requests ends: no header or 429 carried the limit for 3s", map[string]int64{"rpm": 600, "share_pct": 100}},
	}
	var got []Event
	for _, e := range rec.events {
		if e.Kind == EventPace {
			got = append(got, e)
		}
	}
	if len(got) != len(wants) {
		t.Fatalf("pace events %+v, want %d", got, len(wants))
	}
	for i, w := range wants {
		e := got[i]
		if e.ClientID != w.client || e.Reason != w.why || !maps.Equal(e.Counts, w.counts) || e.Key.Tenant != "team" {
			t.Errorf("event %d: %q %q %v (tenant %q), want %q %q %v", i, e.ClientID, e.Reason, e.Counts, e.Key.Tenant, w.client, w.why, w.counts)
		}
	}
}

// The pace follows the tighter of the request and input-token limits, by
// the clients' token estimates.
func TestPaceOnInputTokens(t *testing.T) {
	t.Parallel()
	// Two clients, 10 calls a second each of 200 input tokens: 20 calls and
	// 4,000 tokens a second against limits of 100 calls and 1,000 tokens.
	report := func(f *Fleet, client string, tokens, tpm int64) {
		f.Report(Usage{Target: streamTarget, ClientID: client, Admitted: 100, FirstAttemptTokens: tokens,
			RequestsPerMinute: 6000, InputTokensPerMinute: tpm})
	}
	tests := []struct {
		name         string
		tokens, tpm  int64
		want         float64
		why, without string
	}{
		{name: "tokens bind", tokens: 20000, tpm: 60000, want: 0.93 * 1000 / 4000, why: "pacing a limit of 60000 input tokens a minute"},
		{name: "requests bind", tokens: 200, tpm: 60000, want: 0.93 * 100 / 20 * 1, why: "", without: "pacing"},
		{name: "no token limit", tokens: 20000, tpm: 0, want: 1, without: "tokens"},
		{name: "no token estimates", tokens: 0, tpm: 60000, want: 1, without: "tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, _, _ := newTestFleet(t, nil)
			report(f, "a", tt.tokens, tt.tpm)
			report(f, "b", tt.tokens, tt.tpm)
			a := f.Assign(streamTarget, "a")
			if min(tt.want, 1)-0.01 > a.AdmitFraction || a.AdmitFraction > min(tt.want, 1)+0.01 ||
				!strings.Contains(a.Reason, tt.why) || (tt.without != "" && strings.Contains(a.Reason, tt.without)) {
				t.Fatalf("assignment %+v, want a fraction about %.3f, a reason with %q and without %q", a, min(tt.want, 1), tt.why, tt.without)
			}
		})
	}
}

// A pace that a 429 carrying a token limit started begins at
// StartCutOn429 of its share (the fleet is over the limit already, and the
// demand the pace divides by lags); one that a request limit's 429 started
// begins at its share.
func TestPaceStartedByATokenLimits429StartsCut(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		rpm, tpm int64 // the 429's limits
		want     float64
	}{
		{name: "input tokens", tpm: 60000, want: 0.93 * 1000 / 4000 * StartCutOn429},
		{name: "requests", rpm: 600, want: 0.93 * 10 / 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, _, _ := newTestFleet(t, nil)
			for _, client := range []string{"a", "b"} { // 20 calls and 4,000 tokens a second
				f.Report(Usage{Target: streamTarget, ClientID: client, Admitted: 100, FirstAttemptTokens: 20000})
			}
			a := ask("a", rateLimit, time.Second)
			a.RequestsPerMinute, a.InputTokensPerMinute = tt.rpm, tt.tpm
			f.Decide(a)
			if got := f.Assign(streamTarget, "a").AdmitFraction; got < tt.want-0.01 || got > tt.want+0.01 {
				t.Fatalf("admit fraction %.3f after the 429, want about %.3f", got, tt.want)
			}
		})
	}
}

// Token estimates are corrected by what the responses said was used: the
// fleet paces on its estimates times used over estimated, bounded, and only
// once enough estimated tokens have a usage.
func TestPaceCorrectsTokenEstimatesByUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name            string
		used, estimated int64
		want            float64 // the admitted share
	}{
		{name: "no usage read", want: 0.93 * 1000 / 4000},
		{name: "the provider counts 1.25 × the estimates", used: 25000, estimated: 20000, want: 0.93 * 1000 / 5000},
		{name: "the provider counts half", used: 10000, estimated: 20000, want: 0.93 * 1000 / 2000},
		{name: "off by more than 4 ×: bounded", used: 200000, estimated: 20000, want: 0.93 * 1000 / 16000},
		{name: "too few estimated tokens to tell", used: 9000, estimated: 4000, want: 0.93 * 1000 / 4000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, _, _ := newTestFleet(t, nil)
			// Two clients, 10 calls a second each of 200 estimated input
			// tokens, against a limit of 1,000 tokens a second.
			for _, client := range []string{"a", "b"} {
				f.Report(Usage{Target: streamTarget, ClientID: client, Admitted: 100, FirstAttemptTokens: 20000,
					RequestsPerMinute: 6000, InputTokensPerMinute: 60000,
					InputTokensUsed: tt.used / 2, InputTokensEstimated: tt.estimated / 2})
			}
			a := f.Assign(streamTarget, "a")
			if a.AdmitFraction < tt.want-0.01 || a.AdmitFraction > tt.want+0.01 {
				t.Fatalf("admitted %.3f, want %.3f", a.AdmitFraction, tt.want)
			}
			if corrected := strings.Contains(a.Reason, "token estimates ×"); corrected != (tt.want != 0.93*1000/4000) {
				t.Fatalf("reason %q: says the correction %v, want %v", a.Reason, corrected, !corrected)
			}
		})
	}
}

// A bucket shows each limit it knows, with what the provider last said is
// left and when it is whole again; the pace's reason says it too.
func TestLimitsShowWhatIsLeft(t *testing.T) {
	t.Parallel()
	f, clk, _ := newTestFleet(t, nil)
	left := [3]LimitLeft{{Remaining: 3, Reset: 6 * time.Second}, {Remaining: -1}, {Remaining: -1}}
	for _, client := range []string{"a", "b"} {
		f.Report(Usage{Target: streamTarget, ClientID: client, Admitted: 100, RequestsPerMinute: 600, Left: left})
	}
	clk.advance(2 * time.Second)
	a := f.Assign(streamTarget, "a")
	if !strings.Contains(a.Reason, "the provider says it is whole again in 4s") {
		t.Errorf("reason %q, want when the limit is whole again", a.Reason)
	}
	var v BucketView
	page, _ := f.Buckets("team", "", "", 10, "")
	for _, b := range page {
		if b.Key.Scope == ScopeRateLimit {
			v = b
		}
	}
	want := []LimitView{{Name: "requests", PerMinute: 600, Pacing: true, Remaining: 3, Seen: 2 * time.Second, ResetIn: 4 * time.Second}}
	if !slices.Equal(v.Limits, want) {
		t.Fatalf("limits %+v, want %+v", v.Limits, want)
	}
}
