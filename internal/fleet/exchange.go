package fleet

import (
	"context"
	"time"
)

// What replicas of one fleet share. Every replica keeps the whole
// fleet in its own memory and decides from it; a Syncer exchanges, in the
// background, the verdicts (holds, stops, breakers) and each replica's
// counts through an Exchange, an existing engine the replicas already share
// (pgexchange.Exchange: PostgreSQL). Decisions never wait on it.

// Verdict is a bucket's durable state as replicas share it: two registers
// that only move forward (hold and stop: the latest end wins), and the
// breaker, which moves by compare-and-set on Version so that exactly one
// replica makes each transition.
type Verdict struct {
	Key       Key
	HoldUntil time.Time
	// HoldSpan is the hold's length when it was set (it sizes the release
	// window of the waiters' slots).
	HoldSpan  time.Duration
	StopUntil time.Time
	StopWhy   string

	Breaker BreakerState
	// OpenUntil is the end of the open period; once the breaker closed,
	// the moment it closed (its slow start runs from it on every replica).
	OpenUntil  time.Time
	OpenPeriod time.Duration
	OpenWhy    string
	// Version counts the breaker's transitions (0: none yet).
	Version int64

	// ClearedAt is an operator's last clear of the bucket (zero: none) and
	// Cleared what it cleared (Fleet.Clear): a replica applies a clear newer
	// than the last it applied.
	ClearedAt time.Time
	Cleared   Clearing
}

// Counts is one replica's counts of one bucket over the breaker's window
// that ends at its ReplicaCounts' At: sums, not deltas, so that a missed
// exchange loses nothing (the next one replaces it).
type Counts struct {
	Key Key
	// Counted failures, successes, first attempts admitted, first attempts
	// (admitted or shed), retries streams reported, and the retries
	// decisions were asked for (the budget's draws: a replica's share).
	Failures, Successes, Admitted, FirstAttempts, Retries, Asks int64
	// Version is the breaker's version the counts were taken at: the
	// breaker's counts restart at each transition. ProbeOK: successes
	// reported since the breaker went half-open (only while half-open).
	ProbeOK, Version int64
	// Clients are the clients with counted failures in the window (at most
	// maxSharedClients: the breaker needs MinClients of them).
	Clients []string
	// Streamed: Coordinate streams reported on the bucket in the window.
	Streamed bool
	// RequestsPerMinute: the provider's request limit a stream reported.
	RequestsPerMinute int64
	// InputTokensPerMinute: the provider's input-token limit a stream
	// reported; FirstAttemptTokens and RetryTokens the input tokens the
	// streams reported over the window.
	InputTokensPerMinute, FirstAttemptTokens, RetryTokens int64
	// Parked: the calls this replica's streams hold parked now (a gauge):
	// the release after a close and the pace's demand count every
	// replica's.
	Parked int64
	// RecentFailures and RecentSuccesses are the counts of the last
	// Breaker.TripWindow, for the breaker's trip.
	RecentFailures, RecentSuccesses int64
	// UsedTokens and UsedEstimates: the input tokens the responses said
	// were used over the window, and the clients' estimates of those calls.
	UsedTokens, UsedEstimates int64
	// OutputTokensPerMinute: the provider's output-token limit a stream
	// reported; OutputTokens and OutputCalls the output tokens the
	// responses said were produced over the window, and by how many calls
	// (the output pace's average a call).
	OutputTokensPerMinute, OutputTokens, OutputCalls int64
}

// ReplicaCounts is one replica's latest counts.
type ReplicaCounts struct {
	Replica string
	At      time.Time
	Buckets []Counts
	// Urgent: the others should read these now (a probe succeeded, a
	// request limit was learned), not at their next second.
	Urgent bool
}

// Changes is what a Read brings: verdicts and other replicas' counts
// changed since the sequence numbers given, and the newest ones.
type Changes struct {
	Verdicts       []Verdict
	Counts         []ReplicaCounts
	Seq, CountsSeq int64
}

// Exchange is where a fleet's replicas meet. Its calls go to a database
// and may fail; the Syncer retries them and, meanwhile, the replica decides
// from its own state.
type Exchange interface {
	// RaiseRegisters moves each verdict's hold and stop forward to its
	// HoldUntil and StopUntil, never back (the breaker fields are ignored).
	// A register it moved is announced to the other replicas (Wake).
	RaiseRegisters(ctx context.Context, vs []Verdict) error
	// ClearRegisters applies an operator's clear (v.Cleared at
	// v.ClearedAt): it empties the hold and the stop it names, the only
	// write that moves them back, and records the clear, unless the row
	// already has a later one. It is announced to the other replicas (Wake).
	ClearRegisters(ctx context.Context, v Verdict) error
	// MoveBreaker sets v's breaker fields when the shared version is still
	// base (0: no transition yet) and returns the new version, won; when
	// another replica moved it first, it returns the verdict as it is, not
	// won. A win is announced to the other replicas (Wake).
	MoveBreaker(ctx context.Context, v Verdict, base int64) (cur Verdict, won bool, err error)
	// ClaimProbe hands the probe slot of key's half-open breaker (at
	// version) for the interval that starts at now to one replica: it
	// returns true to exactly one caller per interval.
	ClaimProbe(ctx context.Context, key Key, version int64, now time.Time, interval time.Duration, replica string) (bool, error)
	// PublishCounts replaces rc.Replica's counts; urgent ones are announced
	// (Wake).
	PublishCounts(ctx context.Context, rc ReplicaCounts) error
	// Read returns the verdicts changed after seq (every verdict for 0) and
	// the counts other replicas than replica published after countsSeq
	// (every replica's for 0), with the newest sequence numbers.
	Read(ctx context.Context, replica string, seq, countsSeq int64) (Changes, error)
	// Wake is signalled when another replica announced a change, and after
	// the exchange reconnected (a notification may have been missed); nil
	// when the exchange has no notifications.
	Wake() <-chan struct{}
}
