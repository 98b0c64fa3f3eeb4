package refgate

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/enums"
	"github.com/policyd/policyd/internal/fleet"
)

// gateVectors is clients/testdata/gate.json, which the three clients' gates
// read too (docs/clients.md, "The fleet gate").
type gateVectors struct {
	Cases []struct {
		ID    string `json:"id"`
		Steps []struct {
			AtMs   int64 `json:"at_ms"`
			Assign *struct {
				TTLMs              int64           `json:"ttl_ms"`
				Breaker            string          `json:"breaker"`
				HoldMs             int64           `json:"hold_ms"`
				StopMs             int64           `json:"stop_ms"`
				AdmitFraction      float64         `json:"admit_fraction"`
				BatchAdmitFraction *float64        `json:"batch_admit_fraction"`
				ProbePermits       uint32          `json:"probe_permits"`
				Reason             string          `json:"reason"`
				Fallback           *vectorFallback `json:"fallback"`
				ParkHintMs         int64           `json:"park_hint_ms"`
				InFlightLease      *uint32         `json:"in_flight_lease"`
				PacePermits        *uint64         `json:"pace_permits"`
			} `json:"assign"`
			Abandon bool      `json:"abandon"`
			Retry   *struct{} `json:"retry"`
			Outcome string    `json:"outcome"`
			Gate    *struct {
				DeadlineMs  *int64  `json:"deadline_ms"`
				CanFallBack bool    `json:"can_fall_back"`
				Draw        float64 `json:"draw"`
				MaxParkMs   *int64  `json:"max_park_ms"`
				Call        string  `json:"call"`
				Class       string  `json:"class"`
				InFlight    int     `json:"in_flight"`
			} `json:"gate"`
			Resume *struct {
				Call     string  `json:"call"`
				Draw     float64 `json:"draw"`
				InFlight int     `json:"in_flight"`
			} `json:"resume"`
			Want struct {
				Action     string          `json:"action"`
				WaitMs     int64           `json:"wait_ms"`
				Probe      bool            `json:"probe"`
				StopReason string          `json:"stop_reason"`
				Fallback   *vectorFallback `json:"fallback"`
				WaitedMs   *int64          `json:"waited_ms"`
				Reason     string          `json:"reason"`
				Text       string          `json:"text"`
				Fleet      *struct {
					Breaker         string `json:"breaker"`
					Stopped         bool   `json:"stopped"`
					HoldRemainingMs int64  `json:"hold_remaining_ms"`
					OpenRemainingMs int64  `json:"open_remaining_ms"`
					Reason          string `json:"reason"`
				} `json:"fleet"`
			} `json:"want"`
		} `json:"steps"`
		Requires string `json:"requires"`
		Counts   *struct {
			Admitted, Shed, Parked int64
			BatchFirst             int64 `json:"batch_first_attempts"`
			FellBack               int64 `json:"fell_back"`
		} `json:"counts"`
	} `json:"cases"`
	Target struct {
		Provider string `json:"provider"`
		Model    string `json:"model"`
	} `json:"target"`
}

type vectorFallback struct {
	Kind, Provider, Model, Reason string
}

func (f *vectorFallback) proto(t *testing.T) *policydv1.Fallback {
	if f == nil {
		return nil
	}
	k, ok := enums.Parse[policydv1.FallbackKind](f.Kind)
	if !ok {
		t.Fatalf("fallback kind %q", f.Kind)
	}
	return &policydv1.Fallback{Kind: k, Provider: f.Provider, Model: f.Model, Reason: f.Reason}
}

var gateActionNames = map[Action]string{Admit: "admit", Wait: "wait", FallBack: "fall_back", Stop: "stop", Park: "park"}

func TestGateVectors(t *testing.T) {
	b, err := os.ReadFile("../../clients/testdata/gate.json")
	if err != nil {
		t.Fatal(err)
	}
	var v gateVectors
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Cases) == 0 {
		t.Fatal("no cases")
	}
	classes := map[string]Class{"": Interactive, "interactive": Interactive, "batch": Batch}
	breakers := map[string]fleet.BreakerState{"CLOSED": fleet.Closed, "OPEN": fleet.Open, "HALF_OPEN": fleet.HalfOpen}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	target := v.Target.Provider + "/" + v.Target.Model
	breakerNames := map[fleet.BreakerState]string{fleet.Closed: "CLOSED", fleet.Open: "OPEN", fleet.HalfOpen: "HALF_OPEN"}
	for _, c := range v.Cases {
		t.Run(c.ID, func(t *testing.T) {
			if c.Requires != "" && c.Requires != "park" && c.Requires != "classes" && c.Requires != "lease" && c.Requires != "grants" {
				t.Skipf("requires %s", c.Requires)
			}
			g := New()
			g.Target = "openai/gpt-4o"
			parked := map[string]*Parked{}
			for i, s := range c.Steps {
				now := t0.Add(time.Duration(s.AtMs) * time.Millisecond)
				switch {
				case s.Assign != nil:
					a := s.Assign
					br, ok := breakers[a.Breaker]
					if !ok {
						t.Fatalf("step %d: breaker %q", i, a.Breaker)
					}
					g.Assign(now, &Assignment{TTL: ms(a.TTLMs), Breaker: br, Hold: ms(a.HoldMs), Stop: ms(a.StopMs),
						AdmitFraction: a.AdmitFraction, BatchAdmitFraction: a.BatchAdmitFraction, ProbePermits: a.ProbePermits,
						Reason: a.Reason, Fallback: a.Fallback.proto(t), ParkHint: ms(a.ParkHintMs), InFlightLease: a.InFlightLease,
						PacePermits: a.PacePermits})
				case s.Abandon:
					g.Assign(now, nil)
				case s.Outcome != "":
					g.Record(now, s.Outcome == "success")
				case s.Retry != nil:
					want := s.Want.Action == "admit"
					if got := g.AllowRetry(now); got != want {
						t.Fatalf("step %d at %dms: retry allowed %v, want %v", i, s.AtMs, got, want)
					}
					if !want && s.Want.Text != BudgetText(target) {
						t.Fatalf("step %d: text %q, want %q", i, BudgetText(target), s.Want.Text)
					}
				case s.Gate != nil, s.Resume != nil:
					var got Verdict
					if s.Gate != nil {
						deadline := time.Duration(-1)
						if s.Gate.DeadlineMs != nil {
							deadline = ms(*s.Gate.DeadlineMs)
						}
						g.ParkLimit = 0
						if s.Gate.MaxParkMs != nil {
							g.ParkLimit = ms(*s.Gate.MaxParkMs)
							if g.ParkLimit == 0 {
								g.ParkLimit = -1 // parking off
							}
						}
						class, ok := classes[s.Gate.Class]
						if !ok {
							t.Fatalf("step %d: class %q", i, s.Gate.Class)
						}
						g.InFlight = s.Gate.InFlight
						got = g.CheckClass(now, deadline, class, s.Gate.CanFallBack, s.Gate.Draw)
						if got.Parked != nil {
							parked[s.Gate.Call] = got.Parked
						}
					} else {
						p := parked[s.Resume.Call]
						if p == nil {
							t.Fatalf("step %d: no parked call %q", i, s.Resume.Call)
						}
						g.InFlight = s.Resume.InFlight
						got = g.Resume(now, p, s.Resume.Draw)
					}
					w := s.Want
					if gateActionNames[got.Action] != w.Action || got.Wait != ms(w.WaitMs) || got.Probe != w.Probe {
						t.Fatalf("step %d at %dms: got %s wait %v probe %v (%s), want %s wait %dms probe %v",
							i, s.AtMs, gateActionNames[got.Action], got.Wait, got.Probe, got.Reason, w.Action, w.WaitMs, w.Probe)
					}
					if (w.Action == "stop" || w.Action == "park" || w.Action == "fall_back") && w.StopReason != "" && enums.Short(got.StopReason) != w.StopReason {
						t.Fatalf("step %d: stop reason %s, want %s", i, enums.Short(got.StopReason), w.StopReason)
					}
					if w.Action == "fall_back" && !equalFallback(got.Fallback, w.Fallback.proto(t)) {
						t.Fatalf("step %d: fallback %v, want %v", i, got.Fallback, w.Fallback)
					}
					if w.WaitedMs != nil && got.Waited != ms(*w.WaitedMs) {
						t.Fatalf("step %d: waited %v, want %dms", i, got.Waited, *w.WaitedMs)
					}
					if w.Reason != "" && got.Reason != w.Reason {
						t.Fatalf("step %d: reason %q, want %q", i, got.Reason, w.Reason)
					}
					if w.Text != "" || w.Fleet != nil {
						if text := g.Text(now, target, got); text != w.Text {
							t.Fatalf("step %d: text %q, want %q", i, text, w.Text)
						}
						f, wf := g.Fields(now, got), w.Fleet
						if wf == nil || breakerNames[f.Breaker] != wf.Breaker || f.Stopped != wf.Stopped || f.HoldRemaining != ms(wf.HoldRemainingMs) ||
							f.OpenRemaining != ms(wf.OpenRemainingMs) || f.Reason != wf.Reason {
							t.Fatalf("step %d: fleet %+v, want %+v", i, f, wf)
						}
					}
				default:
					t.Fatalf("step %d does nothing", i)
				}
			}
			if w := c.Counts; w != nil && (g.Admitted != w.Admitted || g.Shed != w.Shed || g.Parked != w.Parked || g.BatchFirst != w.BatchFirst ||
				g.FellBack != w.FellBack) {
				t.Fatalf("counts admitted %d shed %d parked %d batch first attempts %d fell back %d, want %+v",
					g.Admitted, g.Shed, g.Parked, g.BatchFirst, g.FellBack, *w)
			}
		})
	}
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

func equalFallback(a, b *policydv1.Fallback) bool {
	return a.GetKind() == b.GetKind() && a.GetProvider() == b.GetProvider() && a.GetModel() == b.GetModel() && a.GetReason() == b.GetReason()
}
