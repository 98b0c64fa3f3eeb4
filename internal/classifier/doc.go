// Package classifier turns a raw failure into a classification: a failure
// type, whether it is retryable, the rule that decided, an actionable
// recovery message and any server delay hint.
//
// The decision is data, not code: an ordered rules table (the embedded
// default_rules.yaml, extendable by an operator's rules) where the first
// matching rule wins. The classifier owns extracting what rules look at from
// a failure: kinds and codes from the error and its cause chain, provider
// error payloads, and delay hints from headers and bodies.
//
// The built-in rules reproduce five real systems' retry decisions; comments
// and tests name them "seed 000" to "seed 004", described in docs/seeds.md.
package classifier
