package policyd_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	policyd "github.com/policyd/policyd/clients/go"
)

const (
	overloadedBody = `{"error":{"message":"The engine is currently overloaded, please try again later.","type":"server_error","code":"overloaded"}}`
	rateLimitBody  = `{"error":{"message":"Rate limit reached for gpt-4o on requests per min (RPM)","type":"requests","code":"rate_limit_exceeded"}}`
	badKeyBody     = `{"error":{"message":"Incorrect API key provided: sk-xxx.","type":"invalid_request_error","code":"invalid_api_key"}}`
	serverErrBody  = `{"error":{"message":"The server had an error while processing your request.","type":"server_error","code":"server_error"}}`
	contextBody    = `{"error":{"message":"This model's maximum context length is 8192 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}`
	authRecovery   = "Fix the API credentials (key, token or endpoint), then run again."
)

var openai = policyd.Call{Provider: "openai", Model: "gpt-4o", Operation: "chat"}

func TestDoSucceedsAfterTransient503(t *testing.T) {
	t.Parallel()
	srv := newFlaky(t, step{status: 503, body: overloadedBody}, step{status: 200, body: `{"choices":[]}`})
	clock := newFakeClock()
	var decided decisions
	c := newClient(t, daemonAddr(t), policyd.WithClock(clock), decided.option())

	if err := c.Do(context.Background(), openai, chat(srv.URL)); err != nil {
		t.Fatalf("Do: %v", err)
	}
	if got := srv.hits.Load(); got != 2 {
		t.Errorf("server saw %d requests, want 2", got)
	}
	ds := decided.get()
	if len(ds) != 1 {
		t.Fatalf("decisions = %+v, want one", ds)
	}
	d := ds[0]
	if d.Action != policyd.ActionRetry || d.FailureType != policyd.FailureTypeOverloaded || d.FailOpen ||
		d.Strategy != "default/OVERLOADED" {
		t.Errorf("decision = %+v, want policyd's RETRY under default/OVERLOADED", d)
	}
	// default/OVERLOADED: 5 s with full jitter; the client waits exactly what policyd said.
	if w := clock.waits(); len(w) != 1 || w[0] != d.Delay || w[0] > 5*time.Second {
		t.Errorf("waits = %v, want [%v] within 5s", w, d.Delay)
	}
}

func TestDoMakesNoRPCOnSuccess(t *testing.T) {
	t.Parallel()
	srv := newFlaky(t, step{status: 200})
	for _, journal := range []bool{false, true} {
		var rpcs rpcCounter
		c := newClient(t, daemonAddr(t), rpcs.option(), policyd.WithJournal(journal))
		if err := c.Do(context.Background(), openai, chat(srv.URL)); err != nil {
			t.Fatalf("Do (journal %v): %v", journal, err)
		}
		if got := rpcs.get(); len(got) != 0 {
			t.Errorf("journal %v: RPCs on the success path: %v, want none", journal, got)
		}
	}
	// Nor with a context id of the caller's (the same test in every client).
	var rpcs0 rpcCounter
	c0 := newClient(t, daemonAddr(t), rpcs0.option())
	call := openai
	call.ContextID = "0191d7a8-7c2e-7b3a-9c1d-2f6e8a4b5c6d"
	if err := c0.Do(context.Background(), call, chat(srv.URL)); err != nil {
		t.Fatal(err)
	}
	if got := rpcs0.get(); len(got) != 0 {
		t.Errorf("ContextID: RPCs on the success path: %v, want none", got)
	}
	// One failure: one NextDelay, nothing else.
	srv = newFlaky(t, step{status: 500, body: serverErrBody}, step{status: 200})
	var rpcs rpcCounter
	c := newClient(t, daemonAddr(t), rpcs.option(), policyd.WithClock(newFakeClock()))
	if err := c.Do(context.Background(), openai, chat(srv.URL)); err != nil {
		t.Fatal(err)
	}
	if got := rpcs.get(); !slices.Equal(got, []string{"NextDelay"}) {
		t.Errorf("RPCs = %v, want [NextDelay]", got)
	}
}

func TestDoWaitsRetryAfter(t *testing.T) {
	t.Parallel()
	srv := newFlaky(t, step{status: 429, headers: map[string]string{"retry-after": "1"}, body: rateLimitBody}, step{status: 200})
	var decided decisions
	c := newClient(t, daemonAddr(t), decided.option())

	start := time.Now()
	if err := c.Do(context.Background(), openai, chat(srv.URL)); err != nil {
		t.Fatalf("Do: %v", err)
	}
	if took := time.Since(start); took < time.Second {
		t.Errorf("Do took %v, want at least the 1s the server asked for", took)
	}
	if ds := decided.get(); len(ds) != 1 || ds[0].RetryAfter != time.Second || ds[0].Delay < time.Second {
		t.Errorf("decisions = %+v, want one honouring retry-after: 1", ds)
	}
	if got := srv.hits.Load(); got != 2 {
		t.Errorf("server saw %d requests, want 2", got)
	}
}

func TestDoStopsOn401WithRecoveryAction(t *testing.T) {
	t.Parallel()
	srv := newFlaky(t, step{status: 401, body: badKeyBody}, step{status: 200})
	c := newClient(t, daemonAddr(t))

	err := c.Do(context.Background(), openai, chat(srv.URL))
	var perr *policyd.Error
	if !errors.As(err, &perr) {
		t.Fatalf("Do = %v, want a *policyd.Error", err)
	}
	if perr.Attempts != 1 || srv.hits.Load() != 1 {
		t.Errorf("attempts = %d, server hits = %d; want 1 and 1 (401 is not retried)", perr.Attempts, srv.hits.Load())
	}
	d := perr.Decision
	if d.Action != policyd.ActionStop || d.StopReason != policyd.StopNotRetryable || d.FailureType != policyd.FailureTypeAuthInvalid {
		t.Errorf("decision = %+v, want STOP NOT_RETRYABLE AUTH_INVALID", d)
	}
	if perr.RecoveryAction() != authRecovery {
		t.Errorf("recovery action = %q, want %q", perr.RecoveryAction(), authRecovery)
	}
	if !strings.Contains(err.Error(), authRecovery) {
		t.Errorf("error %q does not tell the caller the recovery action", err)
	}
	var httpErr *policyd.HTTPError
	if !errors.As(err, &httpErr) || httpErr.StatusCode() != 401 || !strings.Contains(string(httpErr.Body), "invalid_api_key") {
		t.Errorf("the original *HTTPError is not reachable with errors.As: %v", err)
	}
}

func TestDoRetriesDroppedConnection(t *testing.T) {
	t.Parallel()
	srv := newFlaky(t, step{drop: true}, step{status: 200, body: "<html>ok</html>"})
	var decided decisions
	c := newClient(t, daemonAddr(t), decided.option(), policyd.WithProfile("web_fetch"))

	call := policyd.Call{Provider: "web", Operation: "web_fetch"}
	if err := c.Do(context.Background(), call, get(http.DefaultClient, srv.URL)); err != nil {
		t.Fatalf("Do: %v", err)
	}
	ds := decided.get()
	if len(ds) != 1 || ds[0].FailureType != policyd.FailureTypeConnectionError || ds[0].Action != policyd.ActionRetry ||
		ds[0].Strategy != "web_fetch/CONNECTION_ERROR" {
		t.Errorf("decisions = %+v, want one RETRY of a CONNECTION_ERROR under web_fetch", ds)
	}
	if got := srv.hits.Load(); got != 2 {
		t.Errorf("server saw %d requests, want 2", got)
	}
}

func TestDoRetriesSlowResponseAsTimeout(t *testing.T) {
	t.Parallel()
	srv := newFlaky(t, step{delay: 5 * time.Second}, step{status: 200})
	var decided decisions
	c := newClient(t, daemonAddr(t), decided.option())
	hc := &http.Client{Timeout: 200 * time.Millisecond}

	call := policyd.Call{Provider: "web", Operation: "web_fetch", Profile: "web_fetch"}
	if err := c.Do(context.Background(), call, get(hc, srv.URL)); err != nil {
		t.Fatalf("Do: %v", err)
	}
	if ds := decided.get(); len(ds) != 1 || ds[0].FailureType != policyd.FailureTypeTimeout {
		t.Errorf("decisions = %+v, want one for a TIMEOUT", ds)
	}
}

func TestDoCancelStopsMidSleep(t *testing.T) {
	t.Parallel()
	// retry-after: 5 under default/RATE_LIMIT: policyd says wait 5.5-6s (+10 %, +0-10 % jitter).
	srv := newFlaky(t, step{status: 429, headers: map[string]string{"retry-after": "5"}, body: rateLimitBody})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var canceledAt time.Time
	c := newClient(t, daemonAddr(t), policyd.WithOnDecision(func(_ int, _ error, d policyd.Decision) {
		if d.Action != policyd.ActionRetry || d.Delay < 5*time.Second {
			t.Errorf("decision = %+v, want RETRY after at least 5s", d)
		}
		go func() {
			time.Sleep(200 * time.Millisecond)
			canceledAt = time.Now()
			cancel()
		}()
	}))

	err := c.Do(ctx, openai, chat(srv.URL))
	returned := time.Now()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Do = %v, want context.Canceled", err)
	}
	if since := returned.Sub(canceledAt); since > 500*time.Millisecond {
		t.Errorf("Do returned %v after the cancel, want at once", since)
	}
	var httpErr *policyd.HTTPError
	if !errors.As(err, &httpErr) || httpErr.StatusCode() != 429 {
		t.Errorf("the last attempt's error is not reachable: %v", err)
	}
	if got := srv.hits.Load(); got != 1 {
		t.Errorf("server saw %d requests, want 1", got)
	}
}

func TestDoCancelStopsAttemptAtOnce(t *testing.T) {
	t.Parallel()
	srv := newFlaky(t, step{delay: 10 * time.Second})
	var rpcs rpcCounter
	c := newClient(t, daemonAddr(t), rpcs.option())
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()

	start := time.Now()
	err := c.Do(ctx, openai, chat(srv.URL))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do = %v, want context.DeadlineExceeded", err)
	}
	if took := time.Since(start); took > 700*time.Millisecond {
		t.Errorf("Do took %v with a 200ms deadline", took)
	}
	if got := rpcs.get(); len(got) != 0 {
		t.Errorf("RPCs after the caller's deadline passed: %v, want none (nothing to decide)", got)
	}
}

func TestDoNeverWaitsPastDeadline(t *testing.T) {
	t.Parallel()
	srv := newFlaky(t, step{status: 429, headers: map[string]string{"retry-after": "5"}, body: rateLimitBody})
	c := newClient(t, daemonAddr(t))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()

	start := time.Now()
	err := c.Do(ctx, openai, chat(srv.URL))
	var perr *policyd.Error
	if !errors.As(err, &perr) || perr.Decision.StopReason != policyd.StopDeadline {
		t.Fatalf("Do = %v, want a stop because of the deadline", err)
	}
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("Do took %v: it waited instead of stopping", took)
	}
}

// The client checks the deadline itself too, with its own clock: a delay
// policyd allowed (its clock says the deadline is far) is still not waited
// when the client's clock says it would pass the deadline.
func TestDoClampsDelayToDeadline(t *testing.T) {
	t.Parallel()
	srv := newFlaky(t, step{status: 500, body: serverErrBody}, step{status: 200})
	clock := newFakeClock()
	clock.now = clock.now.Add(time.Hour) // the client's clock runs an hour ahead of policyd's
	var decided decisions
	c := newClient(t, daemonAddr(t), policyd.WithClock(clock), decided.option())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	err := c.Do(ctx, openai, chat(srv.URL))
	var perr *policyd.Error
	if !errors.As(err, &perr) || perr.Decision.StopReason != policyd.StopDeadline || perr.Decision.Action != policyd.ActionStop {
		t.Fatalf("Do = %v, want a stop at the deadline", err)
	}
	if w := clock.waits(); len(w) != 0 {
		t.Errorf("waited %v past the deadline", w)
	}
}

func TestDoTaskRunnerSequence(t *testing.T) {
	t.Parallel()
	addr := daemonAddr(t)
	s := time.Second
	tests := []struct {
		name       string
		code       string
		wantWaits  []time.Duration
		wantType   policyd.FailureType
		wantReason policyd.StopReason
	}{
		{name: "test failure: linear 5, 10, 15 s, 4 attempts", code: "TEST_FAILURE",
			wantWaits: []time.Duration{5 * s, 10 * s, 15 * s}, wantType: policyd.FailureTypeTaskTransient,
			wantReason: policyd.StopAttemptsExhausted},
		{name: "rate limit: 30, 60, 120, 240 s capped at 300 s, 7 attempts", code: "RATE_LIMIT",
			wantWaits: []time.Duration{30 * s, 60 * s, 120 * s, 240 * s, 300 * s, 300 * s}, wantType: policyd.FailureTypeRateLimit,
			wantReason: policyd.StopAttemptsExhausted},
		{name: "unknown code: linear like a transient failure", code: "SOMETHING_ODD",
			wantWaits: []time.Duration{5 * s, 10 * s, 15 * s}, wantType: policyd.FailureTypeTaskTransient,
			wantReason: policyd.StopAttemptsExhausted},
		{name: "hook failure: fatal, no retry", code: "HOOK_FAILURE",
			wantWaits: nil, wantType: policyd.FailureTypeTaskFatal, wantReason: policyd.StopNotRetryable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clock := newFakeClock()
			c := newClient(t, addr, policyd.WithClock(clock), policyd.WithProfile("task_runner"))
			runs := 0
			err := c.Do(context.Background(), policyd.Call{Operation: "task"}, func(ctx context.Context, attempt int) error {
				runs++
				return policyd.WithCode(errors.New("the task failed"), tt.code)
			})
			var perr *policyd.Error
			if !errors.As(err, &perr) {
				t.Fatalf("Do = %v, want a *policyd.Error", err)
			}
			if got := clock.waits(); !slices.Equal(got, tt.wantWaits) {
				t.Errorf("waits = %v, want %v", got, tt.wantWaits)
			}
			if runs != len(tt.wantWaits)+1 || perr.Attempts != runs {
				t.Errorf("ran %d attempts (error says %d), want %d", runs, perr.Attempts, len(tt.wantWaits)+1)
			}
			if perr.Decision.FailureType != tt.wantType || perr.Decision.StopReason != tt.wantReason {
				t.Errorf("last decision = %+v, want %v stopped by %v", perr.Decision, tt.wantType, tt.wantReason)
			}
		})
	}
}

func TestDoGenericReturnsResult(t *testing.T) {
	t.Parallel()
	srv := newFlaky(t, step{status: 502, body: "bad gateway"}, step{status: 200, body: "hello"})
	c := newClient(t, daemonAddr(t), policyd.WithClock(newFakeClock()))
	got, err := policyd.Do(context.Background(), c, policyd.Call{Provider: "web", Operation: "web_fetch", Profile: "web_fetch"},
		func(ctx context.Context, attempt int) (string, error) {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return "", err
			}
			if err := policyd.CheckResponse(resp); err != nil {
				return "", err
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			return string(b), err
		})
	if err != nil || got != "hello" {
		t.Fatalf("Do = %q, %v; want \"hello\", nil", got, err)
	}
}

func TestDoFallsBack(t *testing.T) {
	t.Parallel()
	addr := daemonAddr(t)

	t.Run("context too long: a larger model", func(t *testing.T) {
		t.Parallel()
		small := newFlaky(t, step{status: 400, body: contextBody})
		large := newFlaky(t, step{status: 200})
		url := small.URL
		var hints []policyd.Fallback
		c := newClient(t, addr)
		call := openai
		call.Fallback = func(ctx context.Context, call policyd.Call, fb policyd.Fallback) (policyd.Call, error) {
			hints = append(hints, fb)
			call.Model, url = "gpt-4o-large", large.URL
			return call, nil
		}
		err := c.Do(context.Background(), call, func(ctx context.Context, attempt int) error { return chat(url)(ctx, attempt) })
		if err != nil {
			t.Fatalf("Do: %v", err)
		}
		if len(hints) != 1 || hints[0].Kind != policyd.FallbackLargerContextModel || hints[0].Attempt != 1 {
			t.Errorf("fallback hints = %+v, want one LARGER_CONTEXT_MODEL after attempt 1", hints)
		}
		if small.hits.Load() != 1 || large.hits.Load() != 1 {
			t.Errorf("hits: small %d, large %d; want 1 and 1", small.hits.Load(), large.hits.Load())
		}
	})

	t.Run("server errors: another provider after 2 attempts", func(t *testing.T) {
		t.Parallel()
		first := newFlaky(t, step{status: 500, body: serverErrBody})
		second := newFlaky(t, step{status: 200})
		url := first.URL
		c := newClient(t, addr, policyd.WithClock(newFakeClock()),
			policyd.WithFallback(func(ctx context.Context, call policyd.Call, fb policyd.Fallback) (policyd.Call, error) {
				if fb.Kind != policyd.FallbackOtherProvider {
					t.Errorf("fallback kind = %v, want OTHER_PROVIDER", fb.Kind)
				}
				call.Provider, url = "anthropic", second.URL
				return call, nil
			}))
		err := c.Do(context.Background(), openai, func(ctx context.Context, attempt int) error { return chat(url)(ctx, attempt) })
		if err != nil {
			t.Fatalf("Do: %v", err)
		}
		if first.hits.Load() != 2 || second.hits.Load() != 1 {
			t.Errorf("hits: first %d, second %d; want 2 and 1", first.hits.Load(), second.hits.Load())
		}
	})

	t.Run("without a fallback function it stops with the hint", func(t *testing.T) {
		t.Parallel()
		srv := newFlaky(t, step{status: 400, body: contextBody})
		c := newClient(t, addr)
		err := c.Do(context.Background(), openai, chat(srv.URL))
		var perr *policyd.Error
		if !errors.As(err, &perr) || perr.Decision.Action != policyd.ActionFallBack ||
			perr.Decision.Fallback != policyd.FallbackLargerContextModel {
			t.Fatalf("Do = %v, want a *policyd.Error carrying the FALL_BACK hint", err)
		}
		// It says the call stopped, why, and where it would have gone.
		msg := err.Error()
		if !strings.Contains(msg, "stopped after 1 attempt: policyd advised a fallback to LARGER_CONTEXT_MODEL, "+
			"and the call has no fallback function") || strings.Contains(msg, "(policyd: fall back to") {
			t.Errorf("message = %q, want it to say it stopped because no fallback function was given", msg)
		}
	})

	t.Run("a fallback function's error is returned", func(t *testing.T) {
		t.Parallel()
		srv := newFlaky(t, step{status: 400, body: contextBody})
		errNoLarger := errors.New("no larger model")
		c := newClient(t, addr, policyd.WithFallback(func(context.Context, policyd.Call, policyd.Fallback) (policyd.Call, error) {
			return policyd.Call{}, errNoLarger
		}))
		if err := c.Do(context.Background(), openai, chat(srv.URL)); !errors.Is(err, errNoLarger) {
			t.Fatalf("Do = %v, want the fallback function's error", err)
		}
	})
}
