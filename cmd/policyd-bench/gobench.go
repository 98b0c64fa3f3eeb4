package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// goBenchmark is one line of `go test -bench -benchmem` output.
type goBenchmark struct {
	name        string
	nsPerOp     float64
	allocsPerOp int64
}

// runGoBenchmarks runs the in-process benchmarks of the classifier, the
// strategy, NextDelay (alone and with fleet memory) and a Coordinate
// stream's report, from the repository root (the working directory).
func runGoBenchmarks(ctx context.Context) ([]goBenchmark, error) {
	cmd := exec.CommandContext(ctx, "go", "test", "-run", "^$", "-bench", "^Benchmark(Classify|ClassifyNetworkError|ClassifyUnrecognised|Decide|NextDelay|NextDelayFleet|CoordinateReport)$",
		"-benchmem", "-benchtime", "1s", "./internal/classifier", "./internal/strategy", "./internal/policy", "./internal/server")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("go test -bench: %w\n%s", err, out)
	}
	return parseGoBench(out)
}

// parseGoBench reads "BenchmarkX-2  123  456.7 ns/op  8 B/op  1 allocs/op" lines.
func parseGoBench(out []byte) ([]goBenchmark, error) {
	var res []goBenchmark
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		g := goBenchmark{name: f[0]}
		if i := strings.LastIndexByte(g.name, '-'); i > 0 {
			g.name = g.name[:i]
		}
		for i := 2; i+1 < len(f); i += 2 {
			switch f[i+1] {
			case "ns/op":
				g.nsPerOp, _ = strconv.ParseFloat(f[i], 64)
			case "allocs/op":
				g.allocsPerOp, _ = strconv.ParseInt(f[i], 10, 64)
			}
		}
		res = append(res, g)
	}
	if len(res) == 0 {
		return nil, fmt.Errorf("go test -bench printed no benchmark lines:\n%s", out)
	}
	return res, nil
}
