package policyd

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// A call's class reaches the gate: on a target paced at 80 % for
// interactive calls and 20 % for batch ones, a draw of 0.5 admits an
// interactive call and sheds a batch one, which the gate counts as such;
// an attempt is in flight while it runs.
func TestDoGatesByClass(t *testing.T) {
	clock := &setClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := newClient(nil, newConfig([]Option{WithClock(clock), WithRand(constRand(0.5)), WithParkLimit(0),
		WithLogger(slog.New(slog.DiscardHandler))}))
	c.streamStarted.Store(true) // no stream: the test assigns
	call := Call{Provider: "openai", Model: "gpt-4o", Operation: "chat", InputTokens: 12}
	tg, _ := targetOf(call)
	c.gate.assign(clock.now, tg, &assignment{ttl: time.Minute, admitFraction: 0.8, batchAdmitFraction: 0.2, hasBatchFraction: true,
		reason: "pacing"})
	ok := func(context.Context, int) error { return nil }

	var during uint64
	if err := c.Do(context.Background(), call, func(context.Context, int) error {
		c.gate.mu.Lock()
		defer c.gate.mu.Unlock()
		during = c.gate.entries[tg].inFlight
		return nil
	}); err != nil || during != 1 || c.gate.entries[tg].inFlight != 0 {
		t.Fatalf("interactive: %v, %d in flight during the attempt and %d after; want admitted, 1 and 0",
			err, during, c.gate.entries[tg].inFlight)
	}
	call.Class = ClassBatch
	err := c.Do(context.Background(), call, ok)
	var pe *Error
	if !errors.Is(err, ErrNotAdmitted) || !errors.As(err, &pe) || pe.Decision.StopReason != StopFleetShed ||
		pe.Decision.StopText != "the fleet admits 20% of batch first attempts to openai/gpt-4o, not this one: pacing" {
		t.Fatalf("batch: %v, want FLEET_SHED at the batch share", err)
	}
	e := c.gate.entries[tg]
	if e.u.admitted != 1 || e.u.shed != 1 || e.u.batchFirst != 1 || e.u.firstInputTokens != 24 {
		t.Fatalf("counts %+v, want 1 admitted, 1 shed (batch), 24 input tokens", e.u)
	}

	call.Class = "bulk"
	ran := false
	err = c.Do(context.Background(), call, func(context.Context, int) error { ran = true; return nil })
	if err == nil || ran || !strings.Contains(err.Error(), `Call.Class "bulk"`) {
		t.Fatalf("an unknown class: %v (ran: %v), want an error naming Call.Class and no attempt", err, ran)
	}
}
