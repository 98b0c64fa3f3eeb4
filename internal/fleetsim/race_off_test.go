//go:build !race

package fleetsim

// raceEnabled: see race_on_test.go.
const raceEnabled = false
