package policyd

import (
	"maps"
	"net/http"
	"testing"

	policydv1 "github.com/policyd/policyd/clients/go/internal/gen/policyd/v1"
)

// clients/testdata/coordinate.json: scripts of calls, outcomes and clock
// steps on one client's table, and the reports the stream sends; the
// Python and TypeScript clients replay the same file.
func TestCoordinateVectors(t *testing.T) {
	v := readVectors[struct {
		ID    string `json:"id"`
		Steps []struct {
			AtMs         int64 `json:"at_ms"`
			FirstAttempt *struct {
				Draw        float64 `json:"draw"`
				CanFallBack bool    `json:"can_fall_back"`
				InputTokens uint64  `json:"input_tokens"`
			} `json:"first_attempt"`
			Outcome string `json:"outcome"`
			Usage   *struct {
				InputTokensUsed  uint64 `json:"input_tokens_used"`
				Estimated        uint64 `json:"estimated"`
				OutputTokensUsed uint64 `json:"output_tokens_used"`
			} `json:"usage"`
			FailedLocally bool              `json:"failed_locally"`
			Retry         bool              `json:"retry"`
			Observe       map[string]string `json:"observe"`
			Assign        *vectorAssignment `json:"assign"`
			Report        *[]struct {
				ElapsedMs        int64             `json:"elapsed_ms"`
				Admitted         uint64            `json:"admitted"`
				Shed             uint64            `json:"shed"`
				FellBack         uint64            `json:"fell_back"`
				Succeeded        uint64            `json:"succeeded"`
				Failed           uint64            `json:"failed"`
				Retries          uint64            `json:"retries"`
				RateLimitHeaders map[string]string `json:"rate_limit_headers"`
				FirstInputTokens uint64            `json:"first_attempt_input_tokens"`
				InputTokensUsed  uint64            `json:"input_tokens_used"`
				EstimatedForUsed uint64            `json:"input_tokens_estimated_for_used"`
				OutputUsed       uint64            `json:"output_tokens_used"`
				OutputUsedCalls  uint64            `json:"output_tokens_used_calls"`
			} `json:"report"`
		} `json:"steps"`
	}](t, "coordinate.json")
	tg := v.Target.target()
	for _, c := range v.Cases {
		t.Run(c.ID, func(t *testing.T) {
			co, clock := testCoordinator(t)
			g := co.c.gate
			t0 := clock.now
			for i, s := range c.Steps {
				clock.now = t0.Add(ms(s.AtMs))
				now := clock.now
				switch {
				case s.FirstAttempt != nil:
					g.check(now, tg, -1, gateCall{canFallBack: s.FirstAttempt.CanFallBack, inputTokens: s.FirstAttempt.InputTokens},
						constRand(s.FirstAttempt.Draw), -1)
				case s.Outcome != "":
					g.record(now, tg, s.Outcome == "success")
					if s.Usage != nil {
						g.recordUsage(now, tg, s.Usage.InputTokensUsed, s.Usage.Estimated)
						if s.Usage.OutputTokensUsed > 0 {
							g.recordOutput(now, tg, s.Usage.OutputTokensUsed)
						}
					}
				case s.FailedLocally:
					g.countFailedLocally(now, tg)
				case s.Retry:
					g.countRetry(now, tg, 0)
				case s.Observe != nil:
					h := http.Header{}
					for k, val := range s.Observe {
						h.Set(k, val)
					}
					if kept := rateLimitHeaders(h); kept != nil {
						g.observeRateLimits(now, tg, kept)
					}
				case s.Assign != nil:
					g.assign(now, tg, s.Assign.assignment(t))
				case s.Report != nil:
					var st fakeStream
					if err := co.sendReports(&st, reportActive); err != nil {
						t.Fatal(err)
					}
					var got []*policydv1.BucketUsage
					for _, m := range st.sent {
						got = append(got, m.GetUsage()...)
					}
					want := *s.Report
					if len(got) != len(want) {
						t.Fatalf("step %d at %dms: %d usages, want %d: %v", i, s.AtMs, len(got), len(want), got)
					}
					for j, w := range want {
						u := got[j]
						h := u.GetRateLimitHeaders()
						if h == nil {
							h = map[string]string{}
						}
						if u.GetElapsed().AsDuration() != ms(w.ElapsedMs) || u.GetAdmitted() != w.Admitted || u.GetShed() != w.Shed || u.GetFellBack() != w.FellBack ||
							u.GetSucceeded() != w.Succeeded || u.GetFailed() != w.Failed || u.GetRetries() != w.Retries ||
							!maps.Equal(h, w.RateLimitHeaders) || u.GetFirstAttemptInputTokens() != w.FirstInputTokens ||
							u.GetInputTokensUsed() != w.InputTokensUsed || u.GetInputTokensEstimatedForUsed() != w.EstimatedForUsed ||
							u.GetOutputTokensUsed() != w.OutputUsed || u.GetOutputTokensUsedCalls() != w.OutputUsedCalls {
							t.Fatalf("step %d at %dms: usage %v, want %+v", i, s.AtMs, u, w)
						}
					}
				default:
					t.Fatalf("step %d does nothing", i)
				}
			}
		})
	}
}
