package policyd_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	policyd "github.com/policyd/policyd/clients/go"
	policydv1 "github.com/policyd/policyd/clients/go/internal/gen/policyd/v1"
)

func uuid4(t *testing.T) string {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// attemptSummary renders a journal's attempts as "TYPE/ACTION" strings.
func attemptSummary(as []*policydv1.Attempt) []string {
	var out []string
	for _, a := range as {
		out = append(out, fmt.Sprintf("%d %s/%s", a.GetAttempt(),
			strings.TrimPrefix(a.GetFailureType().String(), "FAILURE_TYPE_"), strings.TrimPrefix(a.GetDecision().String(), "ACTION_")))
	}
	return out
}

func TestJournal(t *testing.T) {
	t.Parallel()
	addr := journalDaemonAddr(t)
	_, journal := rawClients(t, addr)
	ctx := context.Background()

	t.Run("a resolved run: context, attempts, agent and labels", func(t *testing.T) {
		t.Parallel()
		srv := newFlaky(t, step{status: 503, body: overloadedBody}, step{status: 200})
		c := newClient(t, addr, policyd.WithJournal(true), policyd.WithAgent("go-client-test"), policyd.WithClock(newFakeClock()))
		call := openai
		call.ContextID, call.Labels = uuid4(t), map[string]string{"test": "resolved"}
		if err := c.Do(ctx, call, chat(srv.URL)); err != nil {
			t.Fatalf("Do: %v", err)
		}
		got, err := journal.GetContext(ctx, &policydv1.GetContextRequest{ContextId: call.ContextID})
		if err != nil {
			t.Fatalf("GetContext: %v", err)
		}
		rc := got.GetContext()
		if rc.GetOutcome() != policydv1.Outcome_OUTCOME_RESOLVED || rc.GetAgent() != "go-client-test" ||
			rc.GetLabels()["test"] != "resolved" || rc.GetProvider() != "openai" || rc.GetOperation() != "chat" {
			t.Errorf("context = %v, want RESOLVED by go-client-test with its labels", rc)
		}
		if s := attemptSummary(got.GetAttempts()); len(s) != 1 || s[0] != "1 OVERLOADED/RETRY" {
			t.Errorf("attempts = %v, want [1 OVERLOADED/RETRY]", s)
		}
		if a := got.GetAttempts()[0]; a.GetHttpStatus() != 503 || a.GetProvider() != "openai" || a.GetModel() != "gpt-4o" {
			t.Errorf("attempt = %v, want the 503 from openai gpt-4o", a)
		}
	})

	t.Run("a failed run has an error report", func(t *testing.T) {
		t.Parallel()
		srv := newFlaky(t, step{status: 503, body: overloadedBody}, step{status: 401, body: badKeyBody})
		c := newClient(t, addr, policyd.WithJournal(true), policyd.WithClock(newFakeClock()))
		err := c.Do(ctx, openai, chat(srv.URL))
		var perr *policyd.Error
		if !errors.As(err, &perr) || perr.ContextID == "" {
			t.Fatalf("Do = %v, want a *policyd.Error naming its journal context", err)
		}
		// The client made the id: a time-ordered UUIDv7 (RFC 9562).
		if u, err := uuid.Parse(perr.ContextID); err != nil || u.Version() != 7 || u.Variant() != uuid.RFC4122 {
			t.Errorf("ContextID = %q, want a UUIDv7 made by the client", perr.ContextID)
		}
		got, err := journal.GetContext(ctx, &policydv1.GetContextRequest{ContextId: perr.ContextID})
		if err != nil {
			t.Fatalf("GetContext: %v", err)
		}
		if got.GetContext().GetOutcome() != policydv1.Outcome_OUTCOME_FAILED {
			t.Errorf("outcome = %v, want FAILED", got.GetContext().GetOutcome())
		}
		if s := attemptSummary(got.GetAttempts()); strings.Join(s, ", ") != "1 OVERLOADED/RETRY, 2 AUTH_INVALID/STOP" {
			t.Errorf("attempts = %v, want [1 OVERLOADED/RETRY 2 AUTH_INVALID/STOP]", s)
		}
		rep, err := journal.GetErrorReport(ctx, &policydv1.GetErrorReportRequest{ContextId: perr.ContextID})
		if err != nil {
			t.Fatalf("GetErrorReport: %v", err)
		}
		r := rep.GetReport()
		if r.GetRootCauseType() != policydv1.FailureType_FAILURE_TYPE_AUTH_INVALID || r.GetRecoveryAction() != authRecovery ||
			len(r.GetAttempts()) != 2 {
			t.Errorf("report = %v, want root cause AUTH_INVALID with its recovery action and both attempts", r)
		}
	})

	t.Run("a cancelled run is abandoned", func(t *testing.T) {
		t.Parallel()
		srv := newFlaky(t, step{status: 429, headers: map[string]string{"retry-after": "5"}, body: rateLimitBody})
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		c, err := policyd.Dial(addr, policyd.WithJournal(true), policyd.WithOnDecision(func(int, error, policyd.Decision) {
			time.AfterFunc(100*time.Millisecond, cancel)
		}))
		if err != nil {
			t.Fatal(err)
		}
		err = c.Do(cctx, openai, chat(srv.URL))
		var perr *policyd.Error
		if !errors.As(err, &perr) || !errors.Is(err, context.Canceled) {
			t.Fatalf("Do = %v, want a cancelled *policyd.Error", err)
		}
		c.Close() // waits for the journal records sent in the background
		got, err := journal.GetContext(ctx, &policydv1.GetContextRequest{ContextId: perr.ContextID})
		if err != nil {
			t.Fatalf("GetContext: %v", err)
		}
		if got.GetContext().GetOutcome() != policydv1.Outcome_OUTCOME_ABANDONED || len(got.GetAttempts()) != 1 {
			t.Errorf("context = %v with %d attempts, want ABANDONED with 1", got.GetContext(), len(got.GetAttempts()))
		}
	})

	t.Run("a deadline during the first attempt fails the run", func(t *testing.T) {
		t.Parallel()
		srv := newFlaky(t, step{delay: 10 * time.Second})
		c, err := policyd.Dial(addr, policyd.WithJournal(true))
		if err != nil {
			t.Fatal(err)
		}
		call := openai
		call.Timeout = 200 * time.Millisecond
		err = c.Do(ctx, call, chat(srv.URL))
		var perr *policyd.Error
		if !errors.As(err, &perr) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Do = %v, want a *policyd.Error past its deadline", err)
		}
		c.Close()
		got, err := journal.GetContext(ctx, &policydv1.GetContextRequest{ContextId: perr.ContextID})
		if err != nil {
			t.Fatalf("GetContext: %v", err)
		}
		if got.GetContext().GetOutcome() != policydv1.Outcome_OUTCOME_FAILED ||
			strings.Join(attemptSummary(got.GetAttempts()), ", ") != "1 TIMEOUT/UNSPECIFIED" {
			t.Errorf("context = %v, attempts %v; want FAILED with one TIMEOUT attempt", got.GetContext(), attemptSummary(got.GetAttempts()))
		}
		if _, err := journal.GetErrorReport(ctx, &policydv1.GetErrorReportRequest{ContextId: perr.ContextID}); err != nil {
			t.Errorf("GetErrorReport: %v", err)
		}
	})

	t.Run("a first-try success records nothing", func(t *testing.T) {
		t.Parallel()
		srv := newFlaky(t, step{status: 200})
		c := newClient(t, addr, policyd.WithJournal(true))
		call := openai
		call.ContextID = uuid4(t)
		if err := c.Do(ctx, call, chat(srv.URL)); err != nil {
			t.Fatal(err)
		}
		_, err := journal.GetContext(ctx, &policydv1.GetContextRequest{ContextId: call.ContextID})
		if status.Code(err) != codes.NotFound {
			t.Errorf("GetContext = %v, want NotFound", err)
		}
	})

	t.Run("a context id policyd refuses stops the call: the caller's to fix", func(t *testing.T) {
		t.Parallel()
		srv := newFlaky(t, step{status: 503, body: overloadedBody}, step{status: 200})
		c := newClient(t, addr, policyd.WithClock(newFakeClock()))
		call := openai
		call.ContextID = "not-a-uuid"
		err := c.Do(ctx, call, chat(srv.URL))
		if !errors.Is(err, policyd.ErrInvalidOptions) || !strings.Contains(err.Error(), "context_id") {
			t.Fatalf("Do = %v, want ErrInvalidOptions naming context_id", err)
		}
		if got := srv.hits.Load(); got != 1 {
			t.Errorf("server saw %d requests, want 1", got)
		}
	})

	t.Run("one context across a fallback", func(t *testing.T) {
		t.Parallel()
		first := newFlaky(t, step{status: 500, body: serverErrBody})
		second := newFlaky(t, step{status: 200})
		url := first.URL
		c := newClient(t, addr, policyd.WithJournal(true), policyd.WithClock(newFakeClock()))
		call := openai
		call.ContextID = uuid4(t)
		call.Fallback = func(_ context.Context, call policyd.Call, _ policyd.Fallback) (policyd.Call, error) {
			call.Provider, call.Model, url = "anthropic", "claude-sonnet-4", second.URL
			return call, nil
		}
		if err := c.Do(ctx, call, func(ctx context.Context, n int) error { return chat(url)(ctx, n) }); err != nil {
			t.Fatal(err)
		}
		got, err := journal.GetContext(ctx, &policydv1.GetContextRequest{ContextId: call.ContextID})
		if err != nil {
			t.Fatal(err)
		}
		if s := strings.Join(attemptSummary(got.GetAttempts()), ", "); s != "1 SERVER_ERROR/RETRY, 2 SERVER_ERROR/FALL_BACK" ||
			got.GetContext().GetOutcome() != policydv1.Outcome_OUTCOME_RESOLVED {
			t.Errorf("context %v, attempts %s; want RESOLVED after RETRY and FALL_BACK", got.GetContext(), s)
		}
	})
}

// Against a daemon without a journal, journaled calls still work; the
// client warns once that nothing is recorded.
func TestJournalOffOnDaemon(t *testing.T) {
	t.Parallel()
	var logs logBuffer
	var rpcs rpcCounter
	c := newClient(t, daemonAddr(t), policyd.WithJournal(true), policyd.WithLogger(logs.logger()),
		policyd.WithClock(newFakeClock()), rpcs.option())
	for range 2 {
		srv := newFlaky(t, step{status: 503, body: overloadedBody}, step{status: 200})
		if err := c.Do(context.Background(), openai, chat(srv.URL)); err != nil {
			t.Fatalf("Do: %v", err)
		}
	}
	if n := strings.Count(logs.String(), "journaled calls are not recorded"); n != 1 {
		t.Errorf("warned %d times that the journal is off, want once:\n%s", n, logs.String())
	}
	if strings.Contains(logs.String(), "unreachable") {
		t.Errorf("a daemon without a journal was taken for an outage:\n%s", logs.String())
	}
	want := "BeginContext NextDelay BeginContext NextDelay"
	if got := strings.Join(rpcs.get(), " "); got != want {
		t.Errorf("RPCs = %s, want %s (nothing more once the journal is known off)", got, want)
	}
}
