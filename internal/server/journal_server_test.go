package server

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/journal"
	"github.com/policyd/policyd/internal/journal/journaltest"
	"github.com/policyd/policyd/internal/policy"
)

func TestMain(m *testing.M) { journaltest.Main(m) }

// startJournaled serves a PolicyServer with a journal on a fresh database of
// a real PostgreSQL and returns both clients and the store.
func startJournaled(t *testing.T, databaseURL string) (policydv1.PolicyServiceClient, policydv1.JournalServiceClient, *journal.Store) {
	t.Helper()
	store, err := journal.Open(testContext(t), databaseURL, journal.WithHealthInterval(100*time.Millisecond), journal.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	ps := NewPolicyServer(policy.Builtin(), WithClock(func() time.Time { return testNow }), WithRand(fixedRand(0.5)),
		WithJournal(store, 2*time.Second))
	conn := startPolicyServer(t, ps)
	return policydv1.NewPolicyServiceClient(conn), policydv1.NewJournalServiceClient(conn), store
}

func TestJournalOffAnswersFailedPrecondition(t *testing.T) {
	t.Parallel()
	conn := startServer(t)
	jc := policydv1.NewJournalServiceClient(conn)
	ctx := testContext(t)
	id := uuid.NewString()
	calls := map[string]func() error{
		"BeginContext": func() error { _, err := jc.BeginContext(ctx, &policydv1.BeginContextRequest{}); return err },
		"RecordAttempt": func() error {
			_, err := jc.RecordAttempt(ctx, &policydv1.RecordAttemptRequest{ContextId: id, Attempt: 1, Failure: &policydv1.Failure{HttpStatus: 503}})
			return err
		},
		"FinishContext": func() error {
			_, err := jc.FinishContext(ctx, &policydv1.FinishContextRequest{ContextId: id})
			return err
		},
		"GetContext": func() error { _, err := jc.GetContext(ctx, &policydv1.GetContextRequest{ContextId: id}); return err },
		"GetErrorReport": func() error {
			_, err := jc.GetErrorReport(ctx, &policydv1.GetErrorReportRequest{ContextId: id})
			return err
		},
		"ListContexts": func() error { _, err := jc.ListContexts(ctx, &policydv1.ListContextsRequest{}); return err },
	}
	for name, call := range calls {
		err := call()
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "--database-url") {
			t.Errorf("%s without a journal: %v, want FailedPrecondition saying how to turn it on", name, err)
		}
	}
	d, err := policydv1.NewPolicyServiceClient(conn).NextDelay(ctx, &policydv1.NextDelayRequest{ContextId: id, Attempt: 1, Failure: &policydv1.Failure{HttpStatus: 503}})
	if err != nil || d.GetDecision().GetJournaled() {
		t.Errorf("NextDelay without a journal: %v journaled=%v, want an answer, not journaled", err, d.GetDecision().GetJournaled())
	}
}

// A failing run recorded through the RPCs: the context, its attempts and
// decisions, and the error report with root cause and recovery.
func TestJournalFailedRunThroughRPCs(t *testing.T) {
	t.Parallel()
	pc, jc, _ := startJournaled(t, journaltest.DatabaseURL(t))
	ctx := testContext(t)

	begun, err := jc.BeginContext(ctx, &policydv1.BeginContextRequest{Agent: "coder", Provider: "openai", Model: "gpt-4", Operation: "chat", Labels: map[string]string{"run": "42"}})
	if err != nil || !begun.GetCreated() {
		t.Fatalf("BeginContext: %v %v", begun, err)
	}
	id := begun.GetContext().GetContextId()
	again, err := jc.BeginContext(ctx, &policydv1.BeginContextRequest{ContextId: id})
	if err != nil || again.GetCreated() {
		t.Fatalf("BeginContext again: created=%v %v, want the existing context", again.GetCreated(), err)
	}

	// Attempt 1: a 503, decided and journaled in one NextDelay call.
	d1, err := pc.NextDelay(ctx, &policydv1.NextDelayRequest{ContextId: id, Attempt: 1,
		Failure: &policydv1.Failure{Provider: "openai", Model: "gpt-4", Operation: "chat", HttpStatus: 503}})
	if err != nil || !d1.GetDecision().GetJournaled() || d1.GetDecision().GetAction() != policydv1.Action_ACTION_RETRY {
		t.Fatalf("NextDelay 1: %v %v", d1, err)
	}
	// Recording the same attempt again is harmless and says so.
	rec, err := jc.RecordAttempt(ctx, &policydv1.RecordAttemptRequest{ContextId: id, Attempt: 1, Failure: &policydv1.Failure{HttpStatus: 503}})
	if err != nil || rec.GetCreated() {
		t.Fatalf("RecordAttempt again: created=%v %v, want already there", rec.GetCreated(), err)
	}
	// Attempt 2: an invalid key, recorded by RecordAttempt with its decision.
	f2 := &policydv1.Failure{Provider: "openai", Operation: "chat", HttpStatus: 401,
		Body: `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`}
	d2, err := pc.NextDelay(ctx, &policydv1.NextDelayRequest{Attempt: 2, Failure: f2})
	if err != nil {
		t.Fatal(err)
	}
	rec, err = jc.RecordAttempt(ctx, &policydv1.RecordAttemptRequest{ContextId: id, Attempt: 2, Failure: f2, Decision: d2.GetDecision(), Duration: nil})
	if err != nil || !rec.GetCreated() || rec.GetClassification().GetFailureType() != policydv1.FailureType_FAILURE_TYPE_AUTH_INVALID {
		t.Fatalf("RecordAttempt 2: %v %v", rec, err)
	}

	got, err := jc.GetContext(ctx, &policydv1.GetContextRequest{ContextId: id})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(got.GetAttempts()); n != 2 || got.GetContext().GetAttemptCount() != 2 {
		t.Fatalf("GetContext: %d attempts, count %d, want 2", n, got.GetContext().GetAttemptCount())
	}
	a1, a2 := got.GetAttempts()[0], got.GetAttempts()[1]
	if a1.GetDecision() != policydv1.Action_ACTION_RETRY || a1.GetDelay().AsDuration() != d1.GetDecision().GetDelay().AsDuration() ||
		a1.GetFailureType() != policydv1.FailureType_FAILURE_TYPE_OVERLOADED || a1.GetStrategy() != "default/OVERLOADED" {
		t.Errorf("attempt 1 = %v", a1)
	}
	if a2.GetDecision() != policydv1.Action_ACTION_STOP || a2.GetStopReason() != policydv1.StopReason_STOP_REASON_NOT_RETRYABLE {
		t.Errorf("attempt 2 = %v", a2)
	}
	if got.GetContext().GetTotalWait().AsDuration() != d1.GetDecision().GetDelay().AsDuration().Truncate(time.Millisecond) {
		t.Errorf("total wait %v, want %v", got.GetContext().GetTotalWait().AsDuration(), d1.GetDecision().GetDelay().AsDuration())
	}

	fin, err := jc.FinishContext(ctx, &policydv1.FinishContextRequest{ContextId: id, Outcome: policydv1.Outcome_OUTCOME_FAILED})
	if err != nil || fin.GetContext().GetOutcome() != policydv1.Outcome_OUTCOME_FAILED || fin.GetReport() == nil {
		t.Fatalf("FinishContext: %v %v", fin, err)
	}
	rep, err := jc.GetErrorReport(ctx, &policydv1.GetErrorReportRequest{ContextId: id})
	if err != nil {
		t.Fatal(err)
	}
	r := rep.GetReport()
	if r.GetRootCauseType() != policydv1.FailureType_FAILURE_TYPE_AUTH_INVALID || !r.GetUnrecoverable() ||
		!strings.Contains(r.GetRecoveryAction(), "credentials") || len(r.GetAttempts()) != 2 || !strings.Contains(r.GetText(), "AUTH_INVALID") {
		t.Errorf("report = %v", r)
	}
	// The manual action is the rules data's, the one owner of that text.
	if want := policy.Builtin().Classifier.TypeText(policydv1.FailureType_FAILURE_TYPE_AUTH_INVALID).ManualAction; want == "" ||
		r.GetManualAction() != want || !strings.Contains(r.GetText(), want) {
		t.Errorf("manual action %q, want the rules data's %q in the report and its text", r.GetManualAction(), want)
	}

	list, err := jc.ListContexts(ctx, &policydv1.ListContextsRequest{Outcome: policydv1.Outcome_OUTCOME_FAILED, FailureType: policydv1.FailureType_FAILURE_TYPE_AUTH_INVALID})
	if err != nil || len(list.GetContexts()) != 1 || list.GetContexts()[0].GetContextId() != id {
		t.Errorf("ListContexts: %v %v", list, err)
	}
}

func TestJournalBadInput(t *testing.T) {
	t.Parallel()
	pc, jc, _ := startJournaled(t, journaltest.DatabaseURL(t))
	ctx := testContext(t)
	id := uuid.NewString()
	tests := []struct {
		name  string
		call  func() error
		code  codes.Code
		field string
	}{
		{"begin: bad id", func() error {
			_, err := jc.BeginContext(ctx, &policydv1.BeginContextRequest{ContextId: "not-a-uuid"})
			return err
		}, codes.InvalidArgument, "context_id"},
		{"record: no id", func() error {
			_, err := jc.RecordAttempt(ctx, &policydv1.RecordAttemptRequest{Attempt: 1, Failure: &policydv1.Failure{}})
			return err
		}, codes.InvalidArgument, "context_id"},
		{"record: attempt 0", func() error {
			_, err := jc.RecordAttempt(ctx, &policydv1.RecordAttemptRequest{ContextId: id, Failure: &policydv1.Failure{}})
			return err
		}, codes.InvalidArgument, "attempt"},
		{"record: no failure", func() error {
			_, err := jc.RecordAttempt(ctx, &policydv1.RecordAttemptRequest{ContextId: id, Attempt: 1})
			return err
		}, codes.InvalidArgument, "failure"},
		{"finish: no outcome", func() error {
			_, err := jc.FinishContext(ctx, &policydv1.FinishContextRequest{ContextId: id})
			return err
		}, codes.InvalidArgument, "outcome"},
		{"finish: unknown context", func() error {
			_, err := jc.FinishContext(ctx, &policydv1.FinishContextRequest{ContextId: id, Outcome: policydv1.Outcome_OUTCOME_RESOLVED})
			return err
		}, codes.NotFound, ""},
		{"report: none", func() error {
			_, err := jc.GetErrorReport(ctx, &policydv1.GetErrorReportRequest{ContextId: id})
			return err
		}, codes.NotFound, ""},
		{"list: bad page token", func() error {
			_, err := jc.ListContexts(ctx, &policydv1.ListContextsRequest{PageToken: "garbage"})
			return err
		}, codes.InvalidArgument, "page_token"},
		{"record: a stop reason the API does not define", func() error {
			_, err := jc.RecordAttempt(ctx, &policydv1.RecordAttemptRequest{ContextId: id, Attempt: 1, Failure: &policydv1.Failure{},
				Decision: &policydv1.Decision{Action: policydv1.Action_ACTION_STOP, StopReason: 999}})
			return err
		}, codes.InvalidArgument, "decision.stop_reason"},
		{"list: a NUL in the provider filter", func() error {
			_, err := jc.ListContexts(ctx, &policydv1.ListContextsRequest{Provider: "open\x00ai"})
			return err
		}, codes.InvalidArgument, "provider"},
		{"next-delay: a context id the journal would refuse", func() error {
			_, err := pc.NextDelay(ctx, &policydv1.NextDelayRequest{ContextId: "urn:uuid:" + id, Attempt: 1, Failure: &policydv1.Failure{}})
			return err
		}, codes.InvalidArgument, "context_id"},
		{"next-delay: bad context id", func() error {
			_, err := pc.NextDelay(ctx, &policydv1.NextDelayRequest{ContextId: "x", Attempt: 1, Failure: &policydv1.Failure{}})
			return err
		}, codes.InvalidArgument, "context_id"},
	}
	for _, tc := range tests {
		err := tc.call()
		if status.Code(err) != tc.code {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.code)
			continue
		}
		if tc.field != "" && violationField(err) != tc.field {
			t.Errorf("%s: field %q, want %q", tc.name, violationField(err), tc.field)
		}
	}
}

// Concurrent journaled NextDelay calls: every one that says journaled=true
// is in the database, exactly once.
func TestJournalConcurrentNextDelay(t *testing.T) {
	t.Parallel()
	pc, jc, _ := startJournaled(t, journaltest.DatabaseURL(t))
	ctx := testContext(t)
	const workers, perWorker = 50, 4
	ids := make([]string, workers)
	var wg sync.WaitGroup
	errs := make(chan error, workers*perWorker)
	for w := range workers {
		ids[w] = uuid.NewString()
		wg.Go(func() {
			for a := 1; a <= perWorker; a++ {
				resp, err := pc.NextDelay(ctx, &policydv1.NextDelayRequest{ContextId: ids[w], Attempt: int32(a),
					Profile: "task_runner", Failure: &policydv1.Failure{Operation: "task", ErrorCode: "TEST_FAILURE"}})
				if err == nil && !resp.GetDecision().GetJournaled() {
					err = context.DeadlineExceeded
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("NextDelay: %v", err)
	}
	for _, id := range ids {
		got, err := jc.GetContext(ctx, &policydv1.GetContextRequest{ContextId: id})
		if err != nil || len(got.GetAttempts()) != perWorker || got.GetContext().GetProfile() != "task_runner" {
			t.Fatalf("context %s: %d attempts (%v), want %d", id, len(got.GetAttempts()), err, perWorker)
		}
	}
}

// PostgreSQL stopped mid-run: NextDelay keeps answering (journaled=false)
// within its normal latency, journal RPCs answer Unavailable, and both
// recover after PostgreSQL is back.
func TestJournalDatabaseDownAndBack(t *testing.T) {
	t.Parallel()
	pg := journaltest.NewServer(t)
	pc, jc, store := startJournaled(t, pg.DatabaseURL(t))
	ctx := testContext(t)
	id := uuid.NewString()
	ask := func(attempt int32) *policydv1.Decision {
		t.Helper()
		start := time.Now()
		resp, err := pc.NextDelay(ctx, &policydv1.NextDelayRequest{ContextId: id, Attempt: attempt, Failure: &policydv1.Failure{Operation: "chat", HttpStatus: 503}})
		if err != nil {
			t.Fatalf("NextDelay with the database down: %v", err)
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Fatalf("NextDelay took %v", took)
		}
		return resp.GetDecision()
	}
	if d := ask(1); !d.GetJournaled() {
		t.Fatal("attempt 1 not journaled with the database up")
	}

	pg.Stop(t)
	// The first call after the stop may spend the journal timeout finding
	// out; after that the store knows and answers at once.
	ask(2)
	deadline := time.Now().Add(5 * time.Second)
	for store.Healthy() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	start := time.Now()
	if d := ask(3); d.GetJournaled() || d.GetAction() != policydv1.Action_ACTION_RETRY {
		t.Errorf("database down: journaled=%v action=%v, want an unjournaled retry", d.GetJournaled(), d.GetAction())
	}
	if took := time.Since(start); took > 100*time.Millisecond {
		t.Errorf("NextDelay with a known-down journal took %v", took)
	}
	if _, err := jc.GetContext(ctx, &policydv1.GetContextRequest{ContextId: id}); status.Code(err) != codes.Unavailable {
		t.Errorf("GetContext with the database down: %v, want Unavailable", err)
	}

	pg.Start(t)
	deadline = time.Now().Add(15 * time.Second)
	for !store.Healthy() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if d := ask(4); !d.GetJournaled() {
		t.Fatal("not journaled after PostgreSQL came back")
	}
	// The client re-records what was not journaled: idempotent.
	for _, a := range []int32{2, 3} {
		if _, err := jc.RecordAttempt(ctx, &policydv1.RecordAttemptRequest{ContextId: id, Attempt: a, Failure: &policydv1.Failure{HttpStatus: 503}}); err != nil {
			t.Fatalf("RecordAttempt %d after recovery: %v", a, err)
		}
	}
	got, err := jc.GetContext(ctx, &policydv1.GetContextRequest{ContextId: id})
	if err != nil || len(got.GetAttempts()) != 4 {
		t.Fatalf("after recovery: %d attempts (%v), want 4", len(got.GetAttempts()), err)
	}
}
