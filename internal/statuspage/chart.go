package statuspage

import (
	"fmt"
	"time"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

// chart is an incident's timeline as SVG shapes: a band of the breaker's
// state over time, and per interval a bar for each series (failed
// attempts, retries held, resolved contexts, first attempts shed). The
// template draws it; the numbers are computed here.
type chart struct {
	ID             int64
	Width, Height  int
	PlotLeft       float64
	PlotRight      float64
	PlotTop        float64
	PlotBottom     float64
	BandTop        float64
	BandHeight     float64
	Bands          []shape
	Bars           []shape
	YMax           int64
	Ticks          []tick
	Series         []legend
	BreakerLegend  []legend
	Summary        string
	IntervalWidth  string
	HasBreakerBand bool
}

// shape is a rectangle with the CSS class that colours it and a tooltip.
type shape struct {
	X, Y, W, H float64
	Class      string
	Title      string
}

type tick struct {
	X     float64
	Label string
}

type legend struct {
	Class, Label string
	X            float64
}

// The series, in the order of their bars within an interval.
var series = []struct {
	class, label string
	value        func(*policydv1.IncidentActivity) int64
}{
	{"s-failed", "failed attempts", (*policydv1.IncidentActivity).GetFailedAttempts},
	{"s-held", "retries held", (*policydv1.IncidentActivity).GetRetriesHeld},
	{"s-resolved", "calls resolved", (*policydv1.IncidentActivity).GetResolvedContexts},
	{"s-parked", "calls parked", (*policydv1.IncidentActivity).GetFirstAttemptsParked},
	{"s-shed", "calls shed", (*policydv1.IncidentActivity).GetFirstAttemptsShed},
}

// The breaker's states, as the band colours them.
var breakerBand = map[policydv1.BreakerState]struct{ class, label string }{
	policydv1.BreakerState_BREAKER_STATE_OPEN:      {"b-open", "breaker open"},
	policydv1.BreakerState_BREAKER_STATE_HALF_OPEN: {"b-half", "half-open"},
	policydv1.BreakerState_BREAKER_STATE_CLOSED:    {"b-closed", "closed"},
}

// newChart lays out an incident's activity; nil when there is none.
func newChart(bins []*policydv1.IncidentActivity, id int64) *chart {
	if len(bins) == 0 {
		return nil
	}
	c := &chart{ID: id, Width: 760, Height: 230, PlotLeft: 60, PlotRight: 725, BandTop: 6, BandHeight: 14,
		PlotTop: 30, PlotBottom: 180}
	total := make([]int64, len(series))
	for _, b := range bins {
		for i, s := range series {
			v := s.value(b)
			total[i] += v
			c.YMax = max(c.YMax, v)
		}
	}
	c.YMax = max(c.YMax, 1)
	n := float64(len(bins))
	slot := (c.PlotRight - c.PlotLeft) / n
	bar := slot * 0.8 / float64(len(series))
	scale := (c.PlotBottom - c.PlotTop) / float64(c.YMax)
	width := bins[0].GetWidth().AsDuration()
	c.IntervalWidth = humanDuration(width)
	start := bins[0].GetStart().AsTime()
	for i, b := range bins {
		x := c.PlotLeft + float64(i)*slot
		at := b.GetStart().AsTime()
		if band, ok := breakerBand[b.GetBreaker()]; ok {
			c.HasBreakerBand = true
			c.Bands = append(c.Bands, shape{X: x, Y: c.BandTop, W: slot + 0.5, H: c.BandHeight, Class: band.class,
				Title: fmt.Sprintf("%s: %s", at.UTC().Format("15:04:05"), band.label)})
		}
		for j, s := range series {
			v := s.value(b)
			if v == 0 {
				continue
			}
			h := float64(v) * scale
			c.Bars = append(c.Bars, shape{X: x + slot*0.1 + float64(j)*bar, Y: c.PlotBottom - h, W: bar, H: h, Class: s.class,
				Title: fmt.Sprintf("%s–%s: %d %s", at.UTC().Format("15:04:05"), at.Add(width).UTC().Format("15:04:05"), v, s.label)})
		}
	}
	for _, i := range []int{0, len(bins) / 2, len(bins)} {
		at := start.Add(time.Duration(i) * width)
		c.Ticks = append(c.Ticks, tick{X: c.PlotLeft + float64(i)*slot, Label: at.UTC().Format("15:04:05")})
	}
	x := c.PlotLeft
	for _, s := range series {
		c.Series = append(c.Series, legend{Class: s.class, Label: s.label, X: x})
		x += 8 + 7*float64(len(s.label)) + 16
	}
	for _, st := range []policydv1.BreakerState{policydv1.BreakerState_BREAKER_STATE_OPEN,
		policydv1.BreakerState_BREAKER_STATE_HALF_OPEN, policydv1.BreakerState_BREAKER_STATE_CLOSED} {
		b := breakerBand[st]
		c.BreakerLegend = append(c.BreakerLegend, legend{Class: b.class, Label: b.label})
	}
	c.Summary = fmt.Sprintf("Timeline of incident %d in intervals of %s: %d failed attempts, %d retries held, %d calls resolved, "+
		"%d first attempts parked, %d first attempts shed.", id, c.IntervalWidth, total[0], total[1], total[2], total[3], total[4])
	return c
}
