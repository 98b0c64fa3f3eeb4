package policyd

import (
	"testing"
	"time"

	policydv1 "github.com/policyd/policyd/clients/go/internal/gen/policyd/v1"
)

// clients/testdata/gate.json, which the daemon's reference gate
// (internal/refgate/gate.go) and the Python and TypeScript gates replay too
// (docs/clients.md, "The fleet gate"): each case is one target's row over
// a monotonic clock.

type gateVectorFallback struct {
	Kind, Provider, Model, Reason string
}

func (f *gateVectorFallback) fallback(t *testing.T) *gateFallback {
	t.Helper()
	if f == nil {
		return nil
	}
	k, ok := policydv1.FallbackKind_value["FALLBACK_KIND_"+f.Kind]
	if !ok {
		t.Fatalf("fallback kind %q", f.Kind)
	}
	return &gateFallback{kind: FallbackKind(k), provider: f.Provider, model: f.Model, reason: f.Reason}
}

// vectorTarget is a fleet vector file's target.
type vectorTarget struct {
	Provider string `json:"provider"`
	Model    string `json:"model"`
	KeyID    string `json:"key_id"`
}

func (v vectorTarget) target() target {
	return target{provider: v.Provider, model: v.Model, keyID: v.KeyID}
}

// vectorAssignment is an assignment in the fleet vectors (gate.json,
// coordinate.json): durations in ms from its receipt.
type vectorAssignment struct {
	TTLMs         int64   `json:"ttl_ms"`
	Breaker       string  `json:"breaker"`
	HoldMs        int64   `json:"hold_ms"`
	StopMs        int64   `json:"stop_ms"`
	AdmitFraction float64 `json:"admit_fraction"`
	// BatchAdmitFraction is the batch class's share (nil: the assignment gives none).
	BatchAdmitFraction *float64            `json:"batch_admit_fraction"`
	ProbePermits       uint32              `json:"probe_permits"`
	Reason             string              `json:"reason"`
	Fallback           *gateVectorFallback `json:"fallback"`
	ParkHintMs         int64               `json:"park_hint_ms"`
	// InFlightLease is the process's lease of requests in flight (nil: no cap).
	InFlightLease *uint32 `json:"in_flight_lease"`
	// PacePermits is the pace's running count of grants (nil: none).
	PacePermits *uint64 `json:"pace_permits"`
}

// assignment is a as the gate keeps it.
func (a *vectorAssignment) assignment(t *testing.T) *assignment {
	t.Helper()
	br, ok := policydv1.BreakerState_value["BREAKER_STATE_"+a.Breaker]
	if !ok {
		t.Fatalf("breaker %q", a.Breaker)
	}
	as := &assignment{ttl: ms(a.TTLMs), breaker: policydv1.BreakerState(br), hold: ms(a.HoldMs), stop: ms(a.StopMs),
		admitFraction: a.AdmitFraction, probePermits: a.ProbePermits, reason: a.Reason,
		fallback: a.Fallback.fallback(t), parkHint: ms(a.ParkHintMs)}
	if a.BatchAdmitFraction != nil {
		as.batchAdmitFraction, as.hasBatchFraction = *a.BatchAdmitFraction, true
	}
	if a.InFlightLease != nil {
		as.inFlightLease, as.leased = *a.InFlightLease, true
	}
	if a.PacePermits != nil {
		as.pacePermits, as.hasPacePermits = *a.PacePermits, true
	}
	return as
}

type gateVectorCase struct {
	ID    string `json:"id"`
	Steps []struct {
		AtMs    int64             `json:"at_ms"`
		Assign  *vectorAssignment `json:"assign"`
		Abandon bool              `json:"abandon"`
		Retry   *struct{}         `json:"retry"`
		Outcome string            `json:"outcome"`
		Gate    *struct {
			DeadlineMs  *int64  `json:"deadline_ms"`
			CanFallBack bool    `json:"can_fall_back"`
			Draw        float64 `json:"draw"`
			MaxParkMs   *int64  `json:"max_park_ms"`
			Call        string  `json:"call"`
			Class       Class   `json:"class"`
			InFlight    uint64  `json:"in_flight"`
		} `json:"gate"`
		Resume *struct {
			Call     string  `json:"call"`
			Draw     float64 `json:"draw"`
			InFlight uint64  `json:"in_flight"`
		} `json:"resume"`
		Want struct {
			Action     string              `json:"action"`
			WaitMs     int64               `json:"wait_ms"`
			Probe      bool                `json:"probe"`
			StopReason string              `json:"stop_reason"`
			Fallback   *gateVectorFallback `json:"fallback"`
			Text       string              `json:"text"`
			WaitedMs   *int64              `json:"waited_ms"`
			Reason     string              `json:"reason"`
			Fleet      *struct {
				Breaker         string `json:"breaker"`
				Stopped         bool   `json:"stopped"`
				HoldRemainingMs int64  `json:"hold_remaining_ms"`
				OpenRemainingMs int64  `json:"open_remaining_ms"`
				Reason          string `json:"reason"`
			} `json:"fleet"`
		} `json:"want"`
	} `json:"steps"`
	Counts *struct {
		Admitted, Shed, Parked uint64
		BatchFirst             uint64 `json:"batch_first_attempts"`
		FellBack               uint64 `json:"fell_back"`
	} `json:"counts"`
	Requires string `json:"requires"`
}

var gateActionNames = map[gateAction]string{gateAdmit: "admit", gateWait: "wait", gateFallBack: "fall_back", gateStop: "stop", gatePark: "park"}

func TestGateVectors(t *testing.T) {
	v := readVectors[gateVectorCase](t, "gate.json")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tg := v.Target.target() // the texts name it
	for _, c := range v.Cases {
		t.Run(c.ID, func(t *testing.T) {
			if c.Requires != "" && c.Requires != "park" && c.Requires != "classes" && c.Requires != "lease" && c.Requires != "grants" {
				t.Skipf("requires %s", c.Requires)
			}
			g := newGate(DefaultGateGrace)
			parked := map[string]*parkedCall{}
			for i, s := range c.Steps {
				now := t0.Add(ms(s.AtMs))
				switch {
				case s.Assign != nil:
					g.assign(now, tg, s.Assign.assignment(t))
				case s.Abandon:
					g.assign(now, tg, nil)
				case s.Outcome != "":
					g.record(now, tg, s.Outcome == "success")
				case s.Retry != nil:
					if got, want := g.allowRetry(now, tg), s.Want.Action == "admit"; got != want {
						t.Fatalf("step %d at %dms: retry allowed %v, want %v", i, s.AtMs, got, want)
					}
					if s.Want.Action == "stop" && budgetText(tg) != s.Want.Text {
						t.Fatalf("step %d: text %q, want %q", i, budgetText(tg), s.Want.Text)
					}
				case s.Gate != nil, s.Resume != nil:
					var got gateVerdict
					if s.Gate != nil {
						deadline := time.Duration(-1)
						if s.Gate.DeadlineMs != nil {
							deadline = ms(*s.Gate.DeadlineMs)
						}
						limit := time.Duration(0) // the default
						if s.Gate.MaxParkMs != nil {
							limit = ms(*s.Gate.MaxParkMs)
							if limit == 0 {
								limit = -1 // parking off
							}
						}
						if err := s.Gate.Class.check(); err != nil {
							t.Fatalf("step %d: %v", i, err)
						}
						gc := gateCall{canFallBack: s.Gate.CanFallBack, batch: s.Gate.Class == ClassBatch}
						g.setInFlight(now, tg, s.Gate.InFlight)
						got = g.check(now, tg, deadline, gc, constRand(s.Gate.Draw), limit)
						if got.parked != nil {
							parked[s.Gate.Call] = got.parked
						}
					} else {
						p := parked[s.Resume.Call]
						if p == nil {
							t.Fatalf("step %d: no parked call %q", i, s.Resume.Call)
						}
						g.setInFlight(now, tg, s.Resume.InFlight)
						got = g.resume(now, tg, p, constRand(s.Resume.Draw))
					}
					w := s.Want
					if gateActionNames[got.action] != w.Action || got.wait != ms(w.WaitMs) || got.probe != w.Probe {
						t.Fatalf("step %d at %dms: got %s wait %v probe %v, want %s wait %dms probe %v",
							i, s.AtMs, gateActionNames[got.action], got.wait, got.probe, w.Action, w.WaitMs, w.Probe)
					}
					if w.WaitedMs != nil && got.waited != ms(*w.WaitedMs) {
						t.Fatalf("step %d: waited %v, want %dms", i, got.waited, *w.WaitedMs)
					}
					if w.Reason != "" && got.reason != w.Reason {
						t.Fatalf("step %d: reason %q, want %q", i, got.reason, w.Reason)
					}
					if (w.Action == "stop" || w.Action == "fall_back" || w.Action == "park") && got.stopReason.String() != w.StopReason {
						t.Fatalf("step %d: stop reason %s, want %s", i, got.stopReason, w.StopReason)
					}
					if w.Action == "fall_back" {
						if want := w.Fallback.fallback(t); got.fallback == nil || *got.fallback != *want {
							t.Fatalf("step %d: fallback %+v, want %+v", i, got.fallback, want)
						}
					}
					if w.Action == "stop" || w.Action == "fall_back" {
						// What the caller sees: the decision the call's error carries.
						d := (&run{target: tg}).gateError(got).Decision
						if d.StopText != w.Text {
							t.Fatalf("step %d: text %q, want %q", i, d.StopText, w.Text)
						}
						f, wf := d.Fleet, w.Fleet
						if wf == nil || f.Breaker != wf.Breaker || f.Stopped != wf.Stopped || f.HoldRemaining != ms(wf.HoldRemainingMs) ||
							f.OpenRemaining != ms(wf.OpenRemainingMs) || f.Reason != wf.Reason {
							t.Fatalf("step %d: fleet %+v, want %+v", i, f, wf)
						}
					}
				default:
					t.Fatalf("step %d does nothing", i)
				}
			}
			if c.Counts != nil {
				e := g.entries[tg]
				if e == nil || e.u.admitted != c.Counts.Admitted || e.u.shed != c.Counts.Shed || e.u.parkChecks != c.Counts.Parked ||
					e.u.batchFirst != c.Counts.BatchFirst || e.u.fellBack != c.Counts.FellBack {
					t.Fatalf("counts %+v, want %+v", e.u, *c.Counts)
				}
			}
		})
	}
}

// constRand always draws the same number.
type constRand float64

func (r constRand) Float64() float64 { return float64(r) }

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// setInFlight sets t's requests in flight, as the vectors' steps say.
func (g *gate) setInFlight(now time.Time, t target, n uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e := g.entry(now, t); e != nil {
		e.inFlight = n
	}
}
