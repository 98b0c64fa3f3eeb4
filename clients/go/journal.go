package policyd

import (
	"context"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	policydv1 "github.com/policyd/policyd/clients/go/internal/gen/policyd/v1"
)

// A journaled call becomes a RetryContext at its first failure: begin
// starts it (so that the agent and labels are recorded), NextDelay records
// each attempt with its decision, and finish ends it with the outcome.
// Attempts policyd could not record at once (journaled=false, or decided
// while it was unreachable) are recorded again when the call ends; every
// journal write is idempotent, so a repeat is harmless.

// journalID is the context id to send with NextDelay; empty when the call
// is not journaled.
func (r *run) journalID() string {
	if !r.journal {
		return ""
	}
	return r.contextID
}

// begin starts the RetryContext once, at the first failure. It returns the
// RPC's error when policyd could not be reached, or refused the call's
// configuration (callerMistake).
func (r *run) begin(ctx context.Context) error {
	if !r.journal || r.begun {
		return nil
	}
	r.failed = true
	if r.contextID == "" {
		r.contextID = newContextID()
	}
	req := &policydv1.BeginContextRequest{
		ContextId: r.contextID, Agent: r.call.Agent, Provider: r.call.Provider, Model: r.call.Model,
		Operation: r.call.Operation, Profile: r.call.Profile, Labels: r.call.Labels,
	}
	err := r.c.rpc(ctx, "BeginContext", func(ctx context.Context) error {
		_, err := r.c.journal.BeginContext(ctx, req)
		return err
	})
	switch {
	case err == nil:
		r.begun = true
	case isJournalOff(err):
		r.journal = false
		r.c.warnOnce("journal-off", "policyd: the daemon's journal is off; journaled calls are not recorded "+
			"(start policyd serve with --database-url)", "error", err)
	case refused(err):
		// Sending it again with every decision would only get it refused again.
		r.journal = false
		if st := status.Convert(err); callerMistake(st.Code(), st.Message()) {
			return err // e.g. a ContextID that is not a UUID: the caller's to fix (refusal)
		}
		r.c.warnOnce("journal-refused/"+status.Code(err).String(), "policyd: the daemon refused to begin a journal "+
			"context; such calls are not journaled", "context_id", r.contextID, "profile", r.call.Profile, "error", err)
	default:
		// policyd is unreachable: NextDelay (or finish) creates the context
		// once it answers.
		return err
	}
	return nil
}

// isJournalOff is policyd's answer when it runs without a database.
func isJournalOff(err error) bool {
	c := status.Code(err)
	return c == codes.FailedPrecondition || c == codes.Unimplemented
}

// record keeps an attempt policyd has not journaled, to record when the
// call ends. d's zero Action records the attempt without a decision.
func (r *run) record(f *Failure, attempt int, took time.Duration, d Decision) {
	req := &policydv1.RecordAttemptRequest{
		ContextId: r.contextID, Attempt: int32(attempt), Failure: f.proto(), Duration: durationProto(took),
		Profile: r.call.Profile, Options: r.options(),
	}
	if d.Action != ActionUnspecified {
		req.Decision = d.proto()
	}
	r.pending = append(r.pending, req)
	r.failed = true
}

// finish ends a journaled call's RetryContext, if it has one. Normally it
// does so before returning; once ctx has ended (the caller cancelled), or
// while policyd is unreachable, it does so in the background (Close waits
// for it), so that neither delays the caller. Either way the caller waits
// at most the daemon timeout. When policyd does not answer, finishing is
// retried in the background (finishRetryDelays), so that a run that ended
// while policyd was away is not left in progress.
func (r *run) finish(ctx context.Context, outcome policydv1.Outcome) {
	if !r.journal || !r.failed {
		return
	}
	bctx := context.WithoutCancel(ctx)
	if ctx.Err() == nil && !r.c.degraded.Load() && r.flush(ctx, outcome) {
		return
	}
	r.c.bg.Add(1)
	go func() {
		defer r.c.bg.Done()
		r.retryFlush(bctx, outcome)
	}()
}

// finishRetryDelays are the waits between background attempts to finish a
// context policyd did not answer for: about a minute in all, long enough
// for a daemon restart, short enough not to pile up in a long-lived agent.
// policyd marks a context nobody finished as abandoned after its
// --abandon-after, so a context these miss does not stay in progress.
var finishRetryDelays = []time.Duration{
	250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second,
	4 * time.Second, 8 * time.Second, 15 * time.Second, 30 * time.Second,
}

// retryFlush flushes, and again after each of finishRetryDelays while
// policyd does not answer; it stops early when the client is closed.
func (r *run) retryFlush(ctx context.Context, outcome policydv1.Outcome) {
	for i := 0; ; i++ {
		if r.flush(ctx, outcome) {
			return
		}
		if i == len(finishRetryDelays) {
			r.c.logger().Warn("policyd: gave up finishing the journal context; policyd will mark it abandoned",
				"context_id", r.contextID, "outcome", outcome.String())
			return
		}
		t := time.NewTimer(finishRetryDelays[i])
		select {
		case <-t.C:
		case <-r.c.closing:
			t.Stop()
			return
		}
	}
}

// flush begins the context if it is not yet, records the pending attempts
// and finishes it. It reports false when policyd did not answer, so that
// the caller tries again later (every step is idempotent), and true when
// it is done, or refused in a way a repeat would not change.
func (r *run) flush(ctx context.Context, outcome policydv1.Outcome) bool {
	ctx, cancel := context.WithTimeout(ctx, r.c.cfg.daemonTimeout)
	defer cancel()
	c := r.c
	if !r.begun {
		if err := r.begin(ctx); err != nil && !refused(err) {
			return false
		}
		if !r.journal {
			return true
		}
	}
	for len(r.pending) > 0 {
		req := r.pending[0]
		err := c.rpc(ctx, "RecordAttempt", func(ctx context.Context) error {
			_, err := c.journal.RecordAttempt(ctx, req)
			return err
		})
		if err != nil && !refused(err) {
			return false
		}
		r.pending = r.pending[1:]
	}
	err := c.rpc(ctx, "FinishContext", func(ctx context.Context) error {
		_, err := c.journal.FinishContext(ctx, &policydv1.FinishContextRequest{ContextId: r.contextID, Outcome: outcome})
		return err
	})
	if err != nil {
		c.logger().Debug("policyd: could not finish the journal context", "context_id", r.contextID,
			"outcome", outcome.String(), "error", err)
		return refused(err)
	}
	return true
}

// newContextID returns a new RetryContext id: a time-ordered UUIDv7 (RFC 9562).
//
// Time-ordered, not random (v4): the journal's primary keys are B-trees on
// the context id, and random ids land on random pages of a large table,
// which costs full-page images in the WAL after each checkpoint (+60 % WAL
// bytes measured on a 6M-row table), buffer misses and ~6-7 µs more per row;
// v7 ids are appended at the right edge of the index.
//
// uuid.NewV7 reads crypto/rand; should that ever fail, the id falls back to
// a random (v4) UUID from uuid.NewString, which the journal accepts just as
// well (only slower to insert), rather than failing the call.
func newContextID() string {
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.NewString()
	}
	return id.String()
}
