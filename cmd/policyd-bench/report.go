package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

// report renders a run's results.
type report struct {
	config       config
	perRound     time.Duration
	measurements []measurement
	peakRSS      int64
	goBench      []goBenchmark
	machine      string
}

// ratio is a named quotient of two scenarios' throughput, with its goal.
type ratio struct {
	key, num, den string
	goal          float64 // 0: none
}

var ratios = []ratio{
	{"classify/echo", "classify", "echo", 0.90},
	{"nextdelay/echo", "nextdelay", "echo", 0},
	// NextDelay with fleet memory (a shared cooldown on every decision)
	// against the same daemon's profile with fleet memory off.
	{"fleet/stateless", "nextdelay", "nextdelay_stateless", 0.90},
	{"journaled/plain", "nextdelay_journaled", "nextdelay", 0.80},
	// A journaled NextDelay against the durable echo: the machine's floor
	// for an acknowledgement that is on disk (docs/benchmarks.md says why
	// this machine does not reach the goal).
	{"journaled/durable", "nextdelay_journaled", "durable", 0.90},
	{"record/echo", "record_attempt", "echo", 0},
}

func (r report) rps(name string) float64 {
	for _, m := range r.measurements {
		if m.name == name {
			return m.result.RPS()
		}
	}
	return 0
}

func (r report) ratio(q ratio) float64 {
	if d := r.rps(q.den); d > 0 {
		return r.rps(q.num) / d
	}
	return 0
}

func (r report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Run of %s on %s.\n\n", time.Now().UTC().Format("2006-01-02"), r.machine)
	fmt.Fprintf(&b, "Each scenario ran %d rounds of %v (after a 1 s warm-up), the scenarios alternating within each round; "+
		"%d calls in flight over %d connections per server; load generator, servers and PostgreSQL on the same machine.\n\n",
		r.config.rounds, r.perRound, r.config.concurrency, r.config.conns)
	b.WriteString("| scenario | server | RPS | p50 | p99 |\n|---|---|---:|---:|---:|\n")
	for _, m := range r.measurements {
		server := "policyd"
		switch m.name {
		case "echo":
			server = "bare grpc-go echo (baseline)"
		case "durable":
			server = "durable echo: append + fdatasync, group commit (the durable floor)"
		case "nextdelay_journaled_200":
			server = "policyd, 200 calls in flight"
		}
		fmt.Fprintf(&b, "| %s | %s | %.0f | %s | %s |\n", m.name, server, m.result.RPS(),
			fmtLatency(m.result.Percentile(0.5)), fmtLatency(m.result.Percentile(0.99)))
	}
	b.WriteString("\n| ratio | value | goal |\n|---|---:|---:|\n")
	for _, q := range ratios {
		goal := ""
		if q.goal > 0 {
			mark := "met"
			if r.ratio(q) < q.goal {
				mark = "missed"
			}
			goal = fmt.Sprintf("≥ %.2f (%s)", q.goal, mark)
		}
		fmt.Fprintf(&b, "| %s | %.2f | %s |\n", q.key, r.ratio(q), goal)
	}
	fmt.Fprintf(&b, "\npolicyd peak RSS (VmHWM) over the run: %.1f MiB.\n", float64(r.peakRSS)/(1<<20))
	if len(r.goBench) > 0 {
		b.WriteString("\n| in-process Go benchmark | ns/op | allocs/op |\n|---|---:|---:|\n")
		stream := ""
		for _, g := range r.goBench {
			fmt.Fprintf(&b, "| %s | %.0f | %d |\n", g.name, g.nsPerOp, g.allocsPerOp)
			if g.name == "BenchmarkCoordinateReport" && g.nsPerOp > 0 {
				stream = fmt.Sprintf("\nA Coordinate stream's report costs the daemon %.1f µs (BenchmarkCoordinateReport: sent over loopback, "+
					"decoded, validated, applied, its assignment recomputed); at one report a second per client process, "+
					"one core serves about %.0f reporting clients.\n", g.nsPerOp/1000, 1e9/g.nsPerOp)
			}
		}
		b.WriteString(stream)
	}
	return b.String()
}

// summaryLine is the last line of the output, for scripts.
func (r report) summaryLine() string {
	parts := []string{"bench:"}
	for _, q := range ratios {
		parts = append(parts, fmt.Sprintf("%s=%.2f", q.key, r.ratio(q)))
	}
	parts = append(parts, fmt.Sprintf("rss_mib=%.0f", float64(r.peakRSS)/(1<<20)))
	for _, g := range r.goBench {
		parts = append(parts, fmt.Sprintf("%s_ns=%.0f", strings.TrimPrefix(g.name, "Benchmark"), g.nsPerOp))
	}
	return strings.Join(parts, " ")
}

func fmtLatency(d time.Duration) string {
	switch {
	case d >= 10*time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	default:
		return d.Round(time.Microsecond).String()
	}
}

// describeMachine says what the figures were measured on.
func describeMachine() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		if _, err := fmt.Sscanf(string(b), "MemTotal: %d kB", &kb); err == nil {
			mem = fmt.Sprintf(", %.0f GiB", float64(kb)/(1<<20))
		}
	}
	return fmt.Sprintf("%d CPUs (%s)%s, %s/%s, %s", runtime.NumCPU(), cpu, mem, runtime.GOOS, runtime.GOARCH, runtime.Version())
}

// replaceSection puts text between the lines "<!-- NAME: begin -->" and
// "<!-- NAME: end -->" of the Markdown file at path.
func replaceSection(path, name, text string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	begin, end := "<!-- "+name+": begin -->\n", "<!-- "+name+": end -->"
	s := string(b)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		return fmt.Errorf("%s: no %q ... %q section to write the results into", path, strings.TrimSpace(begin), end)
	}
	s = s[:i+len(begin)] + text + s[j:]
	return os.WriteFile(path, []byte(s), 0o644)
}
