//go:build race

package fleetsim

// raceEnabled: the race detector is on (go test -race).
const raceEnabled = true
