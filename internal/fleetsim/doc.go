// Package fleetsim is a deterministic discrete-event simulation of a fleet
// of AI agents retrying against a modelled LLM provider. It runs the real
// classifier, strategies and fleet memory in process (policy.Decide, no
// sockets) next to small models of the anchors' published retry defaults,
// and measures what docs/fleet-simulation.md reports: amplification, load,
// the herd after a hint ends, time to recover, goodput and loss.
//
// A run is a virtual clock and an event heap: N agents in a closed loop
// (think, one logical call of up to a policy's attempts, think again)
// against a provider whose behaviour a Scenario scripts. Every random draw
// comes from PCG streams derived from the run's seed, so the same seed gives
// the same output on any machine.
package fleetsim
