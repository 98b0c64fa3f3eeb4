// Command policyd-bench is `make bench`: it starts a bare grpc-go echo
// server (the baseline) and policyd with a real PostgreSQL journal on
// 127.0.0.1, drives both with the same load in alternating rounds, and
// reports throughput and latency as ratios to the baseline measured in the
// same run, plus policyd's peak RSS and the in-process Go benchmarks. With
// --soak it is `make soak` instead: policyd alone under a bounded mixed load
// (soak.go), failing on any error or RSS growth.
//
//	policyd-bench --database-url URL [--policyd bin/policyd] [--seconds 12] [--doc docs/benchmarks.md]
//	policyd-bench --database-url URL --growth 0,1000000,10000000
//	policyd-bench --database-url URL --soak [--seconds 60] [--concurrency 50]
//	policyd-bench echo --listen 127.0.0.1:0     (the baseline server; started by the benchmark itself)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/policyd/policyd/internal/loadgen"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "echo" {
		fs := flag.NewFlagSet("echo", flag.ExitOnError)
		listen := fs.String("listen", "127.0.0.1:0", "`address` to serve the echo baseline on")
		durable := fs.String("durable-dir", "", "serve the durable echo, appending and fdatasyncing each request in `dir`")
		_ = fs.Parse(os.Args[2:])
		if err := serveEcho(*listen, *durable); err != nil {
			fmt.Fprintln(os.Stderr, "policyd-bench:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "policyd-bench:", err)
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

type usageError struct{ error }

type config struct {
	policyd     string
	databaseURL string
	seconds     float64
	rounds      int
	concurrency int
	conns       int
	doc         string
	goBench     bool
	growth      []int64
	soak        bool
	scenarios   []string
	serveArgs   []string
}

func parseConfig(args []string, out io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("policyd-bench", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.policyd, "policyd", "bin/policyd", "policyd `binary` to benchmark")
	fs.StringVar(&c.databaseURL, "database-url", os.Getenv("DATABASE_URL"), "PostgreSQL `url` for policyd's journal (env DATABASE_URL); required")
	secs := ""
	fs.Func("seconds", "measured `seconds` per scenario, split over the rounds (env BENCH_SECONDS, default 12); "+
		"with --soak, the soak's length (env SOAK_SECONDS, default 60)", func(s string) error { secs = s; return nil })
	fs.IntVar(&c.rounds, "rounds", 2, "`rounds`: every scenario runs once per round, scenarios alternating")
	fs.IntVar(&c.concurrency, "concurrency", 50, "calls in flight")
	fs.IntVar(&c.conns, "conns", 2, "gRPC connections to each server, shared round-robin by the workers")
	fs.StringVar(&c.doc, "doc", "", "Markdown `file` whose generated section (between the make bench markers) gets the results")
	fs.BoolVar(&c.goBench, "go-bench", true, "also run the in-process Go benchmarks (go test -bench) and report them")
	only := fs.String("scenarios", "echo,durable,classify,nextdelay,nextdelay_stateless,nextdelay_journaled,nextdelay_journaled_200,record_attempt",
		"comma-separated `names` of the scenarios to run")
	serveArgs := fs.String("serve-args", "", "extra `flags` for policyd serve, space-separated (e.g. --journal-batch-window=1ms)")
	fs.BoolVar(&c.soak, "soak", false, "instead of the benchmark, a soak: mixed RPCs for --seconds, failing on any error or RSS growth (make soak)")
	growth := fs.String("growth", "", "comma-separated journal `sizes` in attempt rows (e.g. 0,1000000,10000000): measure the journal's cost as it grows, instead of the main run")
	if err := fs.Parse(args); err != nil {
		return c, usageError{err}
	}
	if fs.NArg() > 0 {
		return c, usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	if secs == "" && c.soak {
		secs = envOr("SOAK_SECONDS", "60")
	} else if secs == "" {
		secs = envOr("BENCH_SECONDS", "12")
	}
	var err error
	if c.seconds, err = strconv.ParseFloat(secs, 64); err != nil || c.seconds < 1 {
		return c, usageError{fmt.Errorf("--seconds (or BENCH_SECONDS): want a number of seconds ≥ 1, got %q", secs)}
	}
	if c.databaseURL == "" {
		return c, usageError{errors.New("--database-url (or DATABASE_URL) is required: the benchmark measures the real journal")}
	}
	if c.rounds < 1 || c.concurrency < 1 || c.conns < 1 {
		return c, usageError{errors.New("--rounds, --concurrency and --conns must be at least 1")}
	}
	c.scenarios = strings.Split(*only, ",")
	c.serveArgs = strings.Fields(*serveArgs)
	for f := range strings.SplitSeq(*growth, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || n < 0 {
			return c, usageError{fmt.Errorf("--growth: want comma-separated row counts, got %q", f)}
		}
		c.growth = append(c.growth, n)
	}
	return c, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// servers are the processes under load and a pool of connections to each:
// the echo baseline, the durable echo (the machine's durable floor) and
// policyd.
type servers struct {
	echo, durable, policyd       *process
	echoConns, durConns, pdConns []*grpc.ClientConn
	durableDir                   string
}

func startServers(c config) (*servers, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	s := &servers{}
	// The baseline runs with the garbage collector set as policyd sets its
	// own (GOGC=400, see serve's defaultGCPercent), so that the ratios
	// compare servers, not runtime settings.
	if !c.soak { // the soak has no baseline
		if s.echo, err = startProcess("echo", []string{"GOGC=400"}, self, "echo", "--listen", "127.0.0.1:0"); err != nil {
			return nil, err
		}
		// The durable floor writes where PostgreSQL's own data is likely
		// to be: the machine's temporary directory, on its disk.
		if s.durableDir, err = os.MkdirTemp("", "policyd-bench-durable-"); err != nil {
			s.close()
			return nil, err
		}
		if s.durable, err = startProcess("durable", []string{"GOGC=400"}, self, "echo", "--listen", "127.0.0.1:0", "--durable-dir", s.durableDir); err != nil {
			s.close()
			return nil, err
		}
	}
	policyFile := filepath.Join(os.TempDir(), fmt.Sprintf("policyd-bench-%d.yaml", os.Getpid()))
	if err := os.WriteFile(policyFile, []byte(benchPolicy), 0o600); err != nil {
		return nil, err
	}
	if s.policyd, err = startProcess("policyd", nil, c.policyd, append([]string{"serve", "--listen", "127.0.0.1:0", "--log-format", "json",
		"--database-url", c.databaseURL, "--policy", policyFile}, c.serveArgs...)...); err != nil {
		s.close()
		return nil, err
	}
	for range c.conns {
		for _, p := range []struct {
			proc  *process
			conns *[]*grpc.ClientConn
		}{{s.echo, &s.echoConns}, {s.durable, &s.durConns}, {s.policyd, &s.pdConns}} {
			if p.proc == nil {
				continue
			}
			cc, err := grpc.NewClient(p.proc.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				s.close()
				return nil, err
			}
			*p.conns = append(*p.conns, cc)
		}
	}
	return s, nil
}

func (s *servers) close() {
	for _, cc := range append(append(s.echoConns, s.durConns...), s.pdConns...) {
		_ = cc.Close()
	}
	for _, p := range []*process{s.policyd, s.durable, s.echo} {
		if p != nil {
			p.stop()
		}
	}
	if s.durableDir != "" {
		_ = os.RemoveAll(s.durableDir)
	}
}

// measurement is one scenario's results over all rounds.
type measurement struct {
	name   string
	result *loadgen.Result
}

// measure runs every scenario once per round, alternating, after a
// one-second warm-up of each, and returns the merged results in order.
func measure(ctx context.Context, c config, s *servers, names []string, perRound time.Duration, log io.Writer) ([]measurement, error) {
	base := rand.Uint32()
	results := map[string]*loadgen.Result{}
	for round := 0; round <= c.rounds; round++ { // round 0 is the warm-up
		conn := func(i int) (*grpc.ClientConn, *grpc.ClientConn, *grpc.ClientConn) {
			return s.echoConns[i%c.conns], s.durConns[i%c.conns], s.pdConns[i%c.conns]
		}
		d := perRound
		if round == 0 {
			d = time.Second
		}
		for _, name := range names {
			// One scenario set per connection, so workers spread over the connections.
			sets := make([][]scenario, c.conns)
			for i := range sets {
				e, du, p := conn(i)
				sets[i] = scenarios(base+uint32(round)<<8+uint32(i), e, du, p)
			}
			idx := indexOf(sets[0], name)
			if idx < 0 {
				return nil, usageError{fmt.Errorf("--scenarios: unknown scenario %q", name)}
			}
			concurrency := c.concurrency
			if n := sets[0][idx].concurrency; n > 0 {
				concurrency = n
			}
			r := loadgen.Run(ctx, concurrency, d, func(ctx context.Context, w, seq int) error {
				return sets[w%c.conns][idx].call(ctx, w, seq)
			})
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			// A failed call does not count in RPS or latency (a journaled
			// NextDelay that answered journaled=false is one: the benchmark
			// measures durable decisions). A few are noted; more than 1%
			// means the run measures something broken and stops it.
			if r.Errors*100 > r.Calls {
				return nil, fmt.Errorf("%s: %d of %d calls failed, the first: %v", name, r.Errors, r.Calls, r.FirstErr)
			}
			if r.Errors > 0 {
				fmt.Fprintf(log, "%s: %d of %d calls failed and are not counted, the first: %v\n", name, r.Errors, r.Calls, r.FirstErr)
			}
			if round == 0 {
				continue
			}
			fmt.Fprintf(log, "round %d  %-20s %9.0f rps  p50 %-9v p99 %v\n", round, name, r.RPS(), r.Percentile(0.5).Round(time.Microsecond), r.Percentile(0.99).Round(time.Microsecond))
			if results[name] == nil {
				results[name] = &loadgen.Result{}
			}
			results[name].Add(r)
		}
	}
	var out []measurement
	for _, name := range names {
		out = append(out, measurement{name, results[name]})
	}
	return out, nil
}

func indexOf(set []scenario, name string) int {
	for i, s := range set {
		if s.name == name {
			return i
		}
	}
	return -1
}

func run(ctx context.Context, args []string, out io.Writer) error {
	c, err := parseConfig(args, out)
	if err != nil {
		return err
	}
	s, err := startServers(c)
	if err != nil {
		return err
	}
	defer s.close()
	if c.soak {
		return runSoak(ctx, c, s, out)
	}
	if len(c.growth) > 0 {
		return runGrowth(ctx, c, s, out)
	}
	names := c.scenarios
	perRound := time.Duration(c.seconds / float64(c.rounds) * float64(time.Second))
	fmt.Fprintf(out, "bench: %d scenarios × %d rounds × %v, concurrency %d over %d connections per server\n",
		len(names), c.rounds, perRound, c.concurrency, c.conns)
	ms, err := measure(ctx, c, s, names, perRound, out)
	if err != nil {
		return err
	}
	rss, err := s.policyd.peakRSS()
	if err != nil {
		return err
	}
	var gb []goBenchmark
	if c.goBench {
		if gb, err = runGoBenchmarks(ctx); err != nil {
			return err
		}
	}
	rep := report{config: c, perRound: perRound, measurements: ms, peakRSS: rss, goBench: gb, machine: describeMachine()}
	text := rep.markdown()
	fmt.Fprintln(out)
	fmt.Fprint(out, text)
	fmt.Fprintln(out)
	fmt.Fprintln(out, rep.summaryLine())
	if c.doc != "" {
		return replaceSection(c.doc, "make bench", text)
	}
	return nil
}
