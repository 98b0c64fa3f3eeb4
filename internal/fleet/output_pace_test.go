package fleet

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// The pace follows the output-token limit where it binds, counting each
// call at the fleet's average output by the usage the responses reported;
// with no output reported, it does not pace on that limit and says so.
func TestPaceOnOutputTokens(t *testing.T) {
	t.Parallel()
	// Two clients, 10 calls a second each (20 in all), against limits of
	// rpm requests and 1,000 output tokens a second.
	tests := []struct {
		name         string
		rpm          int64
		output       [2]int64 // each client's output tokens reported, over 100 calls each
		want         float64
		why, without string
	}{
		{name: "output binds", rpm: 6000, output: [2]int64{40000, 40000}, want: 0.93 * 1000 / (20 * 400),
			why: "pacing a limit of 60000 output tokens a minute (last seen 0s ago): 12 % of first attempts"},
		{name: "the average over every client's calls", rpm: 6000, output: [2]int64{20000, 60000}, want: 0.93 * 1000 / (20 * 400),
			why: "each call counted at 400 output tokens"},
		{name: "requests bind", rpm: 600, output: [2]int64{1000, 1000}, want: 0.93 * 10 / 20,
			why: "pacing a limit of 600 requests a minute", without: "output"},
		{name: "no output reported: requests bind, and the reason says why output does not",
			rpm: 600, want: 0.93 * 10 / 20,
			why: "the output-token limit of 60000 a minute is not paced: no response reported its output yet"},
		{name: "no output reported, no other limit binds", rpm: 6000, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, _, _ := newTestFleet(t, nil)
			for i, client := range []string{"a", "b"} {
				u := Usage{Target: streamTarget, ClientID: client, Admitted: 100, RequestsPerMinute: tt.rpm, OutputTokensPerMinute: 60000}
				if tt.output[i] > 0 {
					u.OutputTokensUsed, u.OutputCalls = tt.output[i], 100
				}
				f.Report(u)
			}
			a := f.Assign(streamTarget, "a")
			if min(tt.want, 1)-0.01 > a.AdmitFraction || a.AdmitFraction > min(tt.want, 1)+0.01 ||
				!strings.Contains(a.Reason, tt.why) || (tt.without != "" && strings.Contains(a.Reason, tt.without)) {
				t.Fatalf("assignment %+v, want a fraction about %.3f, a reason with %q and without %q", a, min(tt.want, 1), tt.why, tt.without)
			}
		})
	}
}

// An output-token limit is learnt like the others: one client's header
// does not pace, a 429 carrying it does; its pace event says it waits for
// the output to be reported; GetBucket's views show it.
func TestOutputLimitIsHeldLikeTheOthers(t *testing.T) {
	t.Parallel()
	f, clk, rec := newTestFleet(t, nil)
	left := [3]LimitLeft{{Remaining: -1}, {Remaining: -1}, {Remaining: 700}}
	f.Report(Usage{Target: streamTarget, ClientID: "a", Admitted: 200, OutputTokensPerMinute: 60000,
		OutputTokensUsed: 80000, OutputCalls: 200, Left: left})
	if a := f.Assign(streamTarget, "a"); a.AdmitFraction != 1 {
		t.Fatalf("one client's header paced: %+v", a)
	}
	on429 := ask("a", rateLimit, time.Second)
	on429.OutputTokensPerMinute, on429.Left = 60000, [3]LimitLeft{{Remaining: -1}, {Remaining: -1}, {Remaining: -1}}
	f.Decide(on429)
	if a := f.Assign(streamTarget, "a"); a.AdmitFraction > 0.93*1000/(20*400)+0.01 || !strings.Contains(a.Reason, "output tokens a minute") {
		t.Fatalf("a 429 carrying the limit did not pace on output: %+v", a)
	}
	var reasons []string
	for _, e := range rec.events {
		if e.Kind == EventPace {
			reasons = append(reasons, e.Reason)
		}
	}
	if !slices.Contains(reasons, "pacing starts: a limit of 60000 output tokens a minute, carried by a 429") {
		t.Errorf("no pace event for the output-token limit: %q", reasons)
	}
	var found bool
	page, _ := f.Buckets("team", "", "", 10, "")
	for _, b := range page {
		for _, l := range b.Limits {
			if l.Name == "output_tokens" {
				found = l.PerMinute == 60000 && l.Pacing && l.Remaining == 700
			}
		}
	}
	if !found {
		t.Errorf("GetBucket's views do not show the output-token limit: %+v", page)
	}
	// Expires LimitTTL after the last header or 429 that carried it, once
	// successes come without it.
	clk.advance(LimitTTL + 1)
	f.Report(Usage{Target: streamTarget, ClientID: "a", Succeeded: 1})
	if a := f.Assign(streamTarget, "a"); a.AdmitFraction != 1 {
		t.Fatalf("the output limit did not expire: %+v", a)
	}
}

// A 429 on a bucket paced only on output tokens cuts the pace (AIMD).
func TestOutputPaceIsCutBy429s(t *testing.T) {
	t.Parallel()
	f, clk, _ := newTestFleet(t, nil)
	for _, client := range []string{"a", "b"} {
		f.Report(Usage{Target: streamTarget, ClientID: client, Admitted: 100, OutputTokensPerMinute: 60000,
			OutputTokensUsed: 40000, OutputCalls: 100})
	}
	clk.advance(300 * time.Millisecond) // a cut comes at most every cutEvery
	before := f.Assign(streamTarget, "a").AdmitFraction
	f.Decide(ask("a", rateLimit, time.Second))
	after := f.Assign(streamTarget, "a").AdmitFraction
	if after >= before*0.95 {
		t.Fatalf("a 429 did not cut the output pace: %.3f → %.3f", before, after)
	}
}

// After a cut the pace probes for the limit again at RisePerSecond, and
// at half that while the output-token limit binds: a call's output is
// counted at the fleet's average until it ends, so an overdraw shows late.
func TestPaceRisesAfterACutByTheLimitThatBinds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		usage Usage // each of two clients' report: 100 calls
		rise  float64
	}{
		{name: "output tokens bind", rise: OutputRisePerSecond,
			usage: Usage{Admitted: 100, OutputTokensPerMinute: 60000, OutputTokensUsed: 40000, OutputCalls: 100}},
		{name: "requests bind", rise: RisePerSecond,
			usage: Usage{Admitted: 100, RequestsPerMinute: 600, OutputTokensPerMinute: 6000000, OutputTokensUsed: 40000, OutputCalls: 100}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, clk, _ := newTestFleet(t, nil)
			for _, client := range []string{"a", "b"} {
				u := tt.usage
				u.Target, u.ClientID = streamTarget, client
				f.Report(u)
			}
			const sinceStart, after = 300 * time.Millisecond, 5 * time.Second
			clk.advance(sinceStart)
			f.Assign(streamTarget, "a") // the pace, and the limit that binds it
			f.Decide(ask("a", rateLimit, time.Second))
			cut := f.Assign(streamTarget, "a").AdmitFraction
			clk.advance(after)
			risen := f.Assign(streamTarget, "a").AdmitFraction
			// The share is proportional to the cut: CutFactor of the pace at
			// the 429 (started at 1, risen for sinceStart), then rising.
			c := CutFactor * (1 + RisePerSecond*sinceStart.Seconds())
			want := (c + tt.rise*after.Seconds()) / c
			if got := risen / cut; got < want-0.005 || got > want+0.005 {
				t.Fatalf("the pace rose ×%.3f in %v after a cut (%.3f → %.3f), want ×%.3f (%v a second)", got, after, cut, risen, want, tt.rise)
			}
		})
	}
}
