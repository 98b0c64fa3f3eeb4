package server

import (
	"context"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

// journalDecision records the attempt NextDelay just decided, when the
// request names a context and the journal is on and healthy, waiting at most
// the journal timeout. It reports whether the attempt is committed; a
// dropped one is not an error: the client can RecordAttempt again later
// (idempotent).
func (s *PolicyServer) journalDecision(ctx context.Context, req *policydv1.NextDelayRequest, d *policydv1.Decision) JournalResult {
	if s.journal == nil || req.GetContextId() == "" {
		return JournalNotAsked
	}
	if !s.journal.Healthy() {
		return JournalDropped
	}
	ctx, cancel := context.WithTimeout(ctx, s.journalTimeout)
	defer cancel()
	a := attemptOf(req.GetContextId(), int(req.GetAttempt()), req.GetFailure(), d.GetClassification(), d, 0)
	if _, err := s.journal.Record(ctx, tenantOf(ctx), a, ensureOf(req.GetFailure(), req.GetProfile())); err != nil {
		return JournalDropped
	}
	return JournalCommitted
}
