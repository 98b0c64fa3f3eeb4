//go:build race

package fleetsim

// raceEnabled: the race detector slows the simulation about tenfold; the
// seed sweeps and the 2,000-agent runs are checked without it (make
// sim-goals, part of make test).
const raceEnabled = true
