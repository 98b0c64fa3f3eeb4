// Command policyd-sim runs the fleet simulation (internal/fleetsim): every
// scenario, process lifetime and policy asked for, one line each on stdout,
// e.g.
//
//	sim: scenario=outage policy=fleet agents=200 life=3 amplification=1.04 load=1.19 herd=1.57 ...
//
// With -svg-dir it draws, per scenario, the upstream attempts per second of
// each policy (process lifetime inf) into <dir>/<scenario>.svg; with -doc it
// rewrites the results table of that Markdown file between the markers
// <!-- sim:table:begin --> and <!-- sim:table:end -->. With -replicas 1,3
// it also runs the outage, quota, herd, partial, restart, tokens and output scenarios with three policyd
// replicas behind a per-call balancer, sharing their fleet through the
// PostgreSQL at -database-url (cleared before each run), or in memory
// without one (the same exchange contract, no database). `make simulate`
// runs it with -svg-dir docs/fleet -doc docs/fleet-simulation.md
// -replicas 1,3 on a throwaway cluster.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/fleet/fleettest"
	"github.com/policyd/policyd/internal/fleet/pgexchange"
	"github.com/policyd/policyd/internal/fleetsim"
	"github.com/policyd/policyd/internal/journal"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "policyd-sim:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("policyd-sim", flag.ContinueOnError)
	scenarios := fs.String("scenario", "all", "scenarios, comma-separated: "+strings.Join(fleetsim.ScenarioNames, ", ")+" (or all)")
	policies := fs.String("policy", "all", "policies, comma-separated: "+strings.Join(fleetsim.PolicyNames, ", ")+" (or all)")
	lives := fs.String("life", "inf,3", "process lifetimes, comma-separated: inf (one process per agent) or logical calls per process")
	agents := fs.Int("agents", 200, "agents in the closed loop")
	seed := fs.Uint64("seed", 1, "the run's seed")
	svgDir := fs.String("svg-dir", "", "draw <dir>/<scenario>.svg (attempts and successful calls per second, and parked calls, life inf, every policy asked for)")
	doc := fs.String("doc", "", "rewrite this Markdown file's table between <!-- sim:table:begin --> and <!-- sim:table:end -->")
	replicaList := fs.String("replicas", "1", "policyd replicas, comma-separated (e.g. 1,3): more than one runs the outage, quota, herd, partial, restart, tokens and output scenarios of the policies with fleet memory, sharing it through -database-url, or in memory without one")
	databaseURL := fs.String("database-url", os.Getenv("DATABASE_URL"), "PostgreSQL `url` the replicas share (migrated; its fleet tables are cleared before each run); empty: they share an in-memory exchange (env DATABASE_URL)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	scs, err := list(*scenarios, fleetsim.ScenarioNames)
	if err != nil {
		return fmt.Errorf("-scenario: %w", err)
	}
	pols, err := list(*policies, fleetsim.PolicyNames)
	if err != nil {
		return fmt.Errorf("-policy: %w", err)
	}
	var lifes []int
	for _, l := range strings.Split(*lives, ",") {
		switch l = strings.TrimSpace(l); l {
		case "inf", "0":
			lifes = append(lifes, 0)
		default:
			n, err := strconv.Atoi(l)
			if err != nil || n < 1 {
				return fmt.Errorf("-life: %q is not inf or a positive number of calls", l)
			}
			lifes = append(lifes, n)
		}
	}

	var replicas []int
	for _, r := range strings.Split(*replicaList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(r))
		if err != nil || n < 1 || n > 16 {
			return fmt.Errorf("-replicas: %q is not a number of replicas from 1 to 16", r)
		}
		replicas = append(replicas, n)
	}
	var exchanges func(n int) ([]fleet.Exchange, func(), error)
	switch {
	case !slices.ContainsFunc(replicas, func(n int) bool { return n > 1 }):
	case *databaseURL == "":
		// The replicas meet in memory: the same contract as PostgreSQL's
		// exchange (fleettest.ExerciseExchange checks both), no database.
		exchanges = fleettest.Exchanges
	default:
		ctx := context.Background()
		if err := journal.Migrate(ctx, *databaseURL); err != nil {
			return fmt.Errorf("-database-url: %w", err)
		}
		exchanges = postgresExchanges(ctx, *databaseURL)
	}

	var results []*fleetsim.Result
	for _, name := range scs {
		sc, err := fleetsim.NewScenario(name, fleetsim.DefaultTiming)
		if err != nil {
			return err
		}
		var chart []*fleetsim.Result
		for _, n := range replicas {
			if n > 1 && !slices.Contains(replicaScenarios, name) {
				continue
			}
			for _, life := range lifes {
				for _, pn := range pols {
					if n > 1 && pn != fleetsim.PolicyFleet && pn != fleetsim.PolicyFleetStream {
						continue // only fleet memory has replicas to share it
					}
					p, err := fleetsim.NewPolicy(pn)
					if err != nil {
						return err
					}
					res, err := fleetsim.Run(fleetsim.Config{Scenario: sc, Policy: p, Agents: *agents, Life: life, Seed: *seed,
						Replicas: n, Exchanges: exchanges})
					if err != nil {
						return err
					}
					fmt.Fprintln(stdout, res.Line())
					results = append(results, res)
					if life == 0 && n == 1 {
						chart = append(chart, res)
					}
				}
			}
		}
		if *svgDir != "" && len(chart) > 0 {
			if err := os.MkdirAll(*svgDir, 0o755); err != nil {
				return err
			}
			if err := drawChart(filepath.Join(*svgDir, name+".svg"), sc, chart); err != nil {
				return fmt.Errorf("chart %s: %w", name, err)
			}
		}
	}
	if *doc != "" {
		if err := rewriteTable(*doc, results, *agents, *seed); err != nil {
			return err
		}
	}
	return nil
}

// replicaScenarios are the scenarios run with several replicas: the ones
// whose outcome depends on the fleet being one (breakers, pacing, holds).
var replicaScenarios = []string{fleetsim.Outage, fleetsim.Quota, fleetsim.Herd, fleetsim.Partial, fleetsim.Restart, fleetsim.Tokens, fleetsim.Output}

func list(s string, all []string) ([]string, error) {
	if s == "all" {
		return all, nil
	}
	var out []string
	for _, n := range strings.Split(s, ",") {
		n = strings.TrimSpace(n)
		ok := false
		for _, a := range all {
			ok = ok || a == n
		}
		if !ok {
			return nil, fmt.Errorf("%q is not one of %s", n, strings.Join(all, ", "))
		}
		out = append(out, n)
	}
	return out, nil
}

// The policies' colours (Okabe–Ito, readable by colour-blind readers) and
// widths: fleet memory drawn thickest, with its streams' gates in black.
var styles = map[string]struct {
	c     color.RGBA
	width vg.Length
	dash  []vg.Length
}{
	fleetsim.PolicyFleetStream: {color.RGBA{0, 0, 0, 255}, 2.2, nil},
	fleetsim.PolicyFleet:       {color.RGBA{0, 114, 178, 255}, 2, nil},
	fleetsim.PolicyStateless:   {color.RGBA{213, 94, 0, 255}, 1.2, nil},
	fleetsim.PolicySDK:         {color.RGBA{0, 158, 115, 255}, 1, []vg.Length{vg.Points(4), vg.Points(2)}},
	fleetsim.PolicyGeminiCLI:   {color.RGBA{204, 121, 167, 255}, 1, []vg.Length{vg.Points(1), vg.Points(2)}},
	fleetsim.PolicyAWSStandard: {color.RGBA{230, 159, 0, 255}, 1, []vg.Length{vg.Points(6), vg.Points(2), vg.Points(1), vg.Points(2)}},
	fleetsim.PolicyGRPCA6:      {color.RGBA{86, 180, 233, 255}, 1, []vg.Length{vg.Points(2), vg.Points(2)}},
}

var titles = map[string]string{
	fleetsim.Outage:  "Full outage: 503 on every attempt to gpt-4o from 60 s to 180 s",
	fleetsim.Quota:   "Shared quota: 600 requests/min on the key from 60 s to 180 s",
	fleetsim.Herd:    "Synchronised hint: 429 with Retry-After to 70 s, from 60 s to 70 s",
	fleetsim.Partial: "Partial: gpt-4o down from 60 s to 180 s, gpt-4o-mini fine",
	fleetsim.Restart: "Outage with policyd killed from 90 s to 120 s",
	fleetsim.Tokens:  "Token quota: 10.8 M input tokens/min on the key, prompts of 1 k–100 k tokens, from 60 s to 180 s",
	fleetsim.Classes: "Shared quota with priority classes: interactive and batch agents, 600 requests/min from 60 s to 180 s",
	fleetsim.Output:  "Output-token quota: 1.08 M output tokens/min on the key (Anthropic's headers), outputs of 100–10 k tokens, from 60 s to 180 s",
}

// drawChart draws two panels, one above the other, with the incident's
// window shaded and every policy's line in the legend: what the provider sees (upstream attempts
// per second) and what the agents' users get (successful calls per second,
// and the calls the gates hold parked, dotted, for fleet-stream).
func drawChart(path string, sc fleetsim.Scenario, results []*fleetsim.Result) error {
	top, err := panel(sc, results, "upstream attempts per second", func(r *fleetsim.Result) []int { return r.PerSecond }, nil)
	if err != nil {
		return err
	}
	top.Title.Text = fmt.Sprintf("%s (%d agents, life inf)", titles[sc.Name], results[0].Agents)
	bottom, err := panel(sc, results, "successful calls per second (dotted: parked)", func(r *fleetsim.Result) []int { return r.GoodPerSecond },
		func(r *fleetsim.Result) []int {
			if r.Policy != fleetsim.PolicyFleetStream {
				return nil
			}
			return r.Parked
		})
	if err != nil {
		return err
	}
	bottom.X.Label.Text = "time (s)"
	const w, h = 10 * vg.Inch, 8 * vg.Inch
	c := vgsvg.New(w, h)
	dc := draw.New(c)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadY: vg.Points(8), PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(4)}
	plots := [][]*plot.Plot{{top}, {bottom}}
	canvases := plot.Align(plots, tiles, dc)
	top.Draw(canvases[0][0])
	bottom.Draw(canvases[1][0])
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = c.WriteTo(f)
	return errors.Join(err, f.Close())
}

// panel plots series(r) for each result, and dotted extra(r) when not nil.
func panel(sc fleetsim.Scenario, results []*fleetsim.Result, ylabel string, series, extra func(*fleetsim.Result) []int) (*plot.Plot, error) {
	p := plot.New()
	p.Y.Label.Text = ylabel
	p.Legend.Top = true
	p.Legend.Left = false
	ymax := 0.0
	for _, r := range results {
		for _, v := range series(r) {
			ymax = max(ymax, float64(v))
		}
	}
	// The incident's window, shaded under the lines.
	start, end := sc.Start.Seconds(), sc.End.Seconds()
	shade, err := plotter.NewPolygon(plotter.XYs{{X: start, Y: 0}, {X: end, Y: 0}, {X: end, Y: ymax}, {X: start, Y: ymax}})
	if err != nil {
		return nil, err
	}
	shade.Color, shade.Width = incidentShade, 0
	p.Add(shade)
	p.Legend.Add("incident", shade)
	line := func(ys []int) (*plotter.Line, error) {
		xys := make(plotter.XYs, len(ys))
		for i, v := range ys {
			xys[i] = plotter.XY{X: float64(i), Y: float64(v)}
		}
		return plotter.NewLine(xys)
	}
	for _, r := range results {
		st, ok := styles[r.Policy]
		if !ok {
			return nil, fmt.Errorf("policy %s has no line style", r.Policy)
		}
		l, err := line(series(r))
		if err != nil {
			return nil, err
		}
		l.LineStyle = draw.LineStyle{Color: st.c, Width: vg.Points(float64(st.width)), Dashes: st.dash}
		p.Add(l)
		p.Legend.Add(r.Policy, l)
		if extra == nil || extra(r) == nil {
			continue
		}
		e, err := line(extra(r))
		if err != nil {
			return nil, err
		}
		e.LineStyle = draw.LineStyle{Color: st.c, Width: vg.Points(1), Dashes: []vg.Length{vg.Points(1), vg.Points(1.5)}}
		p.Add(e)
		p.Legend.Add(r.Policy+" parked", e)
	}
	p.Add(plotter.NewGrid())
	p.X.Min, p.X.Max = 0, sc.Duration.Seconds()
	p.Y.Min = 0
	return p, nil
}

// incidentShade fills the incident's window: light enough that every
// policy's line reads over it.
var incidentShade = color.RGBA{R: 0xe8, G: 0xe8, B: 0xf0, A: 0xff}

const (
	beginMarker = "<!-- sim:table:begin -->"
	endMarker   = "<!-- sim:table:end -->"
)

// rewriteTable replaces the Markdown table between the markers.
func rewriteTable(path string, results []*fleetsim.Result, agents int, seed uint64) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	i, j := bytes.Index(data, []byte(beginMarker)), bytes.Index(data, []byte(endMarker))
	if i < 0 || j < i {
		return errors.New(path + ": no " + beginMarker + " … " + endMarker + " markers")
	}
	var b bytes.Buffer
	b.Write(data[:i+len(beginMarker)])
	fmt.Fprintf(&b, "\n\n_Generated by `make simulate` (%d agents, seed %d); do not edit by hand._\n\n", agents, seed)
	b.WriteString("| scenario | life | policy | loss | goodput/s | ttr_s | p95_s | amplification (after detection) | load | herd (healthy) | other |\n")
	b.WriteString("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, r := range results {
		f := map[string]string{}
		for _, x := range r.Fields() {
			f[x.Name] = x.Value
		}
		var other []string
		for _, k := range []string{"throttled", "quota_used", "unaffected"} {
			if v, ok := f[k]; ok {
				other = append(other, k+" "+v)
			}
		}
		name := r.Policy
		if name == fleetsim.PolicyFleet {
			name = "**fleet**"
		}
		if r.Replicas > 1 {
			name += fmt.Sprintf(" ×%d replicas", r.Replicas)
		}
		amp := f["amplification"]
		if v := f["amplification_after_detection"]; v != "-" {
			amp += " (" + v + ")"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s (%s) | %s |\n", r.Scenario, fleetsim.LifeName(r.Life), name,
			f["loss"], f["goodput"], f["ttr_s"], f["p95_s"], amp, f["load"], f["herd"], f["herd_ref"], strings.Join(other, ", "))
	}
	b.WriteString("\n")
	b.Write(data[j:])
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// postgresExchanges gives a run n exchanges on the database at url, its
// fleet tables cleared first: the replicas meet in PostgreSQL, as the
// daemon's do.
func postgresExchanges(ctx context.Context, url string) func(n int) ([]fleet.Exchange, func(), error) {
	return func(n int) ([]fleet.Exchange, func(), error) {
		if err := pgexchange.Clear(ctx, url); err != nil {
			return nil, nil, err
		}
		return pgexchange.OpenN(ctx, url, n)
	}
}
