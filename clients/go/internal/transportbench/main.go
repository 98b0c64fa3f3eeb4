// Command transportbench measures requests a second through the policyd
// transport against the same requests through the bare transport, in one
// run: a policyd (fleet memory on, the gate and its stream live) and a fake
// provider without limits on 127.0.0.1, workers sending chat requests,
// short rounds of the two alternating so that both see the same machine.
// It prints the two rates, the CPU this process spends on a request each
// way, and one line "transport/bare=R", the median round's ratio.
// scripts/bench.sh runs it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	policyd "github.com/policyd/policyd/clients/go"
	"github.com/policyd/policyd/clients/go/internal/proctest"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	workers := flag.Int("workers", 8, "requests in flight at once")
	round := flag.Duration("round", 500*time.Millisecond, "length of one round of one transport")
	rounds := flag.Int("rounds", 15, "rounds of each transport, alternating")
	cpuprofile := flag.String("cpuprofile", "", "write the transport rounds' CPU profile to this file")
	flag.Parse()
	if *workers < 1 || *round <= 0 || *rounds < 1 {
		return errors.New("flags -workers, -round and -rounds must be positive")
	}

	dir, err := os.MkdirTemp("", "policyd-transportbench-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	policydBin, err := proctest.Binary("POLICYD_BIN", "./cmd/policyd", dir)
	if err != nil {
		return err
	}
	fakeBin, err := proctest.Binary("FAKEPROVIDER_BIN", "./cmd/policyd-fakeprovider", dir)
	if err != nil {
		return err
	}
	d, err := proctest.StartDaemon(policydBin, "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer d.Stop()
	p, err := proctest.StartFakeProvider(fakeBin)
	if err != nil {
		return err
	}
	defer p.Stop()

	pd, err := policyd.Dial(d.Addr)
	if err != nil {
		return err
	}
	defer func() { _ = pd.Close() }()
	base := func() http.RoundTripper {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = *workers
		return t
	}
	bare := &http.Client{Transport: base()}
	through := &http.Client{Transport: pd.RoundTripper(base(), policyd.TransportOptions{KeyID: "bench"})}

	url := p.URL + "/v1/chat/completions"
	body := `{"model":"gpt-4o-mini","max_tokens":16,"messages":[{"role":"user","content":"` + strings.Repeat("Summarise this. ", 60) + `"}]}`
	// Warm both up: connections, the stream's first assignment.
	for _, hc := range []*http.Client{bare, through} {
		if _, _, err := measure(hc, url, body, *workers, 300*time.Millisecond); err != nil {
			return err
		}
	}
	// Short rounds, alternating: each pair sees the same moment of a busy
	// machine, and the median pair's ratio is the answer.
	var ratios []float64
	var bareN, thruN int64
	var bareCPU, thruCPU time.Duration
	for range *rounds {
		b, bcpu, err := measure(bare, url, body, *workers, *round)
		if err != nil {
			return err
		}
		if *cpuprofile != "" {
			f, err := os.Create(*cpuprofile)
			if err != nil {
				return err
			}
			_ = pprof.StartCPUProfile(f)
		}
		n, ncpu, err := measure(through, url, body, *workers, *round)
		if *cpuprofile != "" {
			pprof.StopCPUProfile()
		}
		if err != nil {
			return err
		}
		bareN, thruN, bareCPU, thruCPU = bareN+b, thruN+n, bareCPU+bcpu, thruCPU+ncpu
		ratios = append(ratios, float64(n)/float64(max(b, 1)))
	}
	slices.Sort(ratios)
	secs := (time.Duration(*rounds) * *round).Seconds()
	fmt.Printf("bare: %.0f requests/s, %.1f µs of this process's CPU each\n", float64(bareN)/secs, us(bareCPU)/float64(bareN))
	fmt.Printf("transport: %.0f requests/s, %.1f µs of this process's CPU each\n", float64(thruN)/secs, us(thruCPU)/float64(thruN))
	fmt.Printf("(%d workers, %d rounds of %v each; ratio of the totals %.2f, of the rounds %.2f to %.2f)\n",
		*workers, *rounds, *round, float64(thruN)/float64(bareN), ratios[0], ratios[len(ratios)-1])
	fmt.Printf("transport/bare=%.2f\n", ratios[len(ratios)/2])
	return nil
}

// measure sends chat requests with hc from workers goroutines for d and
// returns how many succeeded and the CPU time this process used; any
// failure is an error.
func measure(hc *http.Client, url, body string, workers int, d time.Duration) (int64, time.Duration, error) {
	cpu0 := cpuTime()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var n atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				if err := chat(hc, url, body); err != nil {
					once.Do(func() { first = err })
					cancel()
					return
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	return n.Load(), cpuTime() - cpu0, first
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func chat(hc *http.Client, url, body string) error {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer bench")
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: %s", url, resp.Status)
	}
	return nil
}
