package fleet

import (
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
		{name: "the limit expires", want: 1,
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
