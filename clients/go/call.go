package policyd

import (
	"context"
	"fmt"
	"time"
)

// Call describes the operation Do retries. Every field is optional; the
// provider, model, operation and method help policyd classify failures and
// decide whether the operation may be repeated.
type Call struct {
	// Provider, e.g. "openai", "anthropic", "google", "web".
	Provider string
	// Model, e.g. "gpt-4o".
	Model string
	// KeyID labels the credential or account the call uses (at most 128
	// bytes), e.g. "prod-key" or a hash of the key — never the key itself.
	// policyd's fleet memory shares rate limits, quotas and auth failures
	// per key: one agent's revoked key or exhausted quota stops the others
	// on the same key, not everyone.
	KeyID string
	// Operation is what is being done: "chat", "chat.stream", "web_fetch",
	// "task", "shell.exec", ...; it decides operation safety.
	Operation string
	// Method is the HTTP method; when empty, the one a failed request
	// carried is used. GET, HEAD and OPTIONS may be repeated; other methods
	// only for model operations, or when Safety says so.
	Method string
	// Profile names the policyd profile; empty: the client's (WithProfile),
	// else "default".
	Profile string
	// Safety overrides the operation safety policyd derives.
	Safety Safety
	// Timeout, when positive, bounds the whole call, all attempts and waits
	// included (one budget shared across attempts); the context's deadline
	// bounds it too.
	Timeout time.Duration
	// RetryFetchErrors retries a generic fetch failure that carries no
	// network code, and (agent_cli) network failures mid-stream (seed 000).
	RetryFetchErrors bool
	// NoContinuation stops instead of continuing an invalid stream once
	// with the continuation prompt (seed 001's continueOnFailedApiCall off).
	NoContinuation bool

	// Class is the call's priority class: ClassInteractive (empty means
	// it) or ClassBatch, which the fleet sheds first when it paces the
	// target (the assignment's batch share). Any other value is Do's error.
	Class Class
	// InputTokens is the input tokens the call sends, exact or estimated
	// (0: not known). The fleet gate reports them with its counts (first
	// attempts and retries; at most 2,000,000 a call), so that policyd can
	// pace a token limit; the transport fills it for each request.
	InputTokens int

	// ContextID is the journal's RetryContext id, a UUID; setting it
	// journals the call whatever WithJournal says. Empty: the client makes
	// one, a time-ordered UUIDv7, when the call is journaled (prefer v7 for
	// ids of your own too: see the README's Journal section).
	ContextID string
	// Agent names the agent in the journal; empty: the client's (WithAgent).
	Agent string
	// Labels are free-form journal labels, e.g. {"run": "nightly"}.
	Labels map[string]string

	// Fallback is called when policyd answers FALL_BACK; nil: the client's
	// (WithFallback), else FALL_BACK stops the call like STOP.
	Fallback FallbackFunc
}

// Class is a call's priority class (docs/clients.md, "The fleet gate"):
// when the fleet paces a target, batch first attempts yield to
// interactive ones.
type Class string

// The priority classes.
const (
	// ClassInteractive is the default: someone waits for the answer.
	ClassInteractive Class = "interactive"
	// ClassBatch is work nobody waits on (a nightly job, an eval run): the
	// gate admits its first attempts at the assignment's batch share.
	ClassBatch Class = "batch"
)

// check says whether c names a class; empty is ClassInteractive.
func (c Class) check() error {
	switch c {
	case "", ClassInteractive, ClassBatch:
		return nil
	}
	return fmt.Errorf("policyd: Call.Class %q is not a class: want %q (the default) or %q", string(c), ClassInteractive, ClassBatch)
}

// inputTokens is the call's input tokens as the gate counts them.
func (c Call) inputTokens() uint64 { return uint64(max(0, c.InputTokens)) }

// FallbackFunc handles a FALL_BACK decision. It gets the call as it stands
// and returns the call to continue with — usually the same call with
// another Provider or Model, which the operation then uses (it reads them
// from variables it shares with the FallbackFunc) — or an error, which Do
// returns as is. The next attempt starts at once; the attempt count goes
// on, so the journal keeps one context across providers. Do calls it at
// most MaxFallbacks times per call.
type FallbackFunc func(ctx context.Context, call Call, fb Fallback) (Call, error)

// MaxFallbacks bounds how often one Do falls back, so that a FallbackFunc
// that always continues cannot loop forever.
const MaxFallbacks = 3

// Fallback is the hint a FallbackFunc gets.
type Fallback struct {
	// Kind is what to fall back to, e.g. FallbackOtherProvider.
	Kind FallbackKind
	// Reason says why, e.g. "2 attempts failed; fall back to OTHER_PROVIDER".
	Reason string
	// Provider and Model name the target from policyd's fallback chains
	// (the policy file's fallbacks), empty when the policy names none.
	Provider, Model string
	// Err is the failed attempt's error.
	Err error
	// Attempt is the failed attempt's number.
	Attempt int
	// Decision is policyd's whole answer.
	Decision Decision
}
