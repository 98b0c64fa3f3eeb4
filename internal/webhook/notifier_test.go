package webhook_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"

	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/webhook"
)

var (
	at     = time.Date(2026, 11, 27, 5, 0, 0, 0, time.UTC)
	key    = fleet.Key{Scope: fleet.ScopeAvailability, Tenant: "acme", Provider: "openai", Model: "gpt-4o"}
	stop   = fleet.Key{Scope: fleet.ScopeAuth, Tenant: "acme", Provider: "openai", KeyID: "k1"}
	secret = []byte("s3cret")
	all    = []string{"breaker_opened", "key_stopped", "budget_exhausted", "incident_resolved"}
)

func ev(kind fleet.EventKind, k fleet.Key) fleet.Event {
	return fleet.Event{At: at, Key: k, Kind: kind, Reason: "test " + string(kind), ClientID: "c1", Counts: map[string]int64{"failures": 3}}
}

// counter counts results.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) WebhookEvent(result string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[result]++
}

func (c *counter) get(result string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[result]
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// sink is a receiver on 127.0.0.1 that parses each request with the
// CloudEvents SDK and checks its signature; status says what to answer
// to the request numbered n (from 1).
type sink struct {
	srv    *httptest.Server
	mu     sync.Mutex
	events []cloudevents.Event
	calls  atomic.Int32
	bad    []string
}

func newSink(t *testing.T, status func(n int) int) *sink {
	s := &sink{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(s.calls.Add(1))
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		defer s.mu.Unlock()
		if got, want := r.Header.Get(webhook.SignatureHeader), webhook.Sign(secret, body); !hmac.Equal([]byte(got), []byte(want)) {
			s.bad = append(s.bad, "signature "+got)
		}
		if ct := r.Header.Get("Content-Type"); ct != webhook.ContentType {
			s.bad = append(s.bad, "content type "+ct)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		e, err := cloudevents.NewEventFromHTTPRequest(r)
		if err != nil {
			s.bad = append(s.bad, "not a CloudEvent: "+err.Error())
		} else {
			s.events = append(s.events, *e)
		}
		w.WriteHeader(status(n))
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *sink) got() []cloudevents.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.bad) > 0 {
		panic(s.bad)
	}
	return slices.Clone(s.events)
}

func ok(int) int { return http.StatusNoContent }

// start runs n until the test ends.
func start(t *testing.T, n *webhook.Notifier) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); n.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func noSleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }

func TestDeliversSignedCloudEvents(t *testing.T) {
	t.Parallel()
	s := newSink(t, ok)
	onlyStops := newSink(t, ok)
	c := &counter{}
	n := webhook.New([]webhook.Receiver{
		{URL: s.srv.URL, Secret: secret, Events: all},
		{URL: onlyStops.srv.URL, Secret: secret, Events: []string{"key_stopped"}},
	}, webhook.WithCounter(c), webhook.WithSource("replica-1"))
	start(t, n)

	n.Notify([]fleet.Event{
		ev(fleet.EventHoldSet, key), // not pushed
		ev(fleet.EventBreakerOpen, key),
		ev(fleet.EventBreakerHalfOpen, key), // not pushed
		ev(fleet.EventBreakerOpen, key),     // the probe failed: the same incident
		ev(fleet.EventBreakerClose, key),
		ev(fleet.EventFleetStop, stop),
		ev(fleet.EventBudgetExhausted, key),
		ev(fleet.EventShed, key), // not pushed
	})
	waitFor(t, "five deliveries", func() bool { return c.get(webhook.Delivered) == 5 })

	var types []string
	for _, e := range s.got() {
		types = append(types, e.Type())
	}
	want := []string{"dev.policyd.fleet.breaker_opened", "dev.policyd.fleet.incident_resolved", "dev.policyd.fleet.key_stopped", "dev.policyd.fleet.budget_exhausted"}
	if !slices.Equal(types, want) {
		t.Errorf("types = %v, want %v", types, want)
	}
	first := s.got()[0]
	if first.Source() != "/policyd/replica-1" || first.Subject() != key.String() || !first.Time().Equal(at) || first.ID() == "" {
		t.Errorf("event attributes: %v", first)
	}
	var data webhook.Data
	if err := first.DataAs(&data); err != nil {
		t.Fatal(err)
	}
	if data.Event != "breaker_opened" || data.FleetEvent != "breaker_open" || data.Tenant != "acme" || data.Bucket != key.String() ||
		data.Scope != "availability" || data.Provider != "openai" || data.Reason != "test breaker_open" || data.Counts["failures"] != 3 {
		t.Errorf("data = %+v", data)
	}
	stops := onlyStops.got()
	if len(stops) != 1 || stops[0].Type() != "dev.policyd.fleet.key_stopped" || stops[0].Subject() != stop.String() {
		t.Errorf("the receiver of key_stopped only got %v", stops)
	}

	// A new opening after the close is a new incident; so is another
	// tenant's breaker on the same provider and model while this one is open.
	other := key
	other.Tenant = "globex"
	n.Notify([]fleet.Event{ev(fleet.EventBreakerOpen, key), ev(fleet.EventBreakerOpen, other)})
	waitFor(t, "the next incidents", func() bool { return c.get(webhook.Delivered) == 7 })
}

func TestSignature(t *testing.T) {
	t.Parallel()
	// echo -n '{"a":1}' | openssl dgst -sha256 -hmac s3cret
	if got := webhook.Sign(secret, []byte(`{"a":1}`)); got != "sha256=5910e62016ef5034272c926c27071992a465c2335cecf41851bda071577f4f6d" {
		t.Errorf("Sign = %q", got)
	}
	if webhook.Sign(secret, []byte("a")) == webhook.Sign([]byte("other"), []byte("a")) {
		t.Error("the signature does not depend on the secret")
	}
}

func TestRetriesWithBackoffThenDelivers(t *testing.T) {
	t.Parallel()
	s := newSink(t, func(n int) int {
		if n <= 2 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	c := &counter{}
	var (
		mu     sync.Mutex
		sleeps []time.Duration
	)
	n := webhook.New([]webhook.Receiver{{URL: s.srv.URL, Secret: secret, Events: all}}, webhook.WithCounter(c),
		webhook.WithRetries(5, 100*time.Millisecond, time.Second),
		webhook.WithSleep(func(ctx context.Context, d time.Duration) error {
			mu.Lock()
			defer mu.Unlock()
			sleeps = append(sleeps, d)
			return ctx.Err()
		}))
	start(t, n)
	n.Notify([]fleet.Event{ev(fleet.EventFleetStop, stop)})
	waitFor(t, "a delivery", func() bool { return c.get(webhook.Delivered) == 1 })
	if got := s.calls.Load(); got != 3 {
		t.Errorf("attempts = %d, want 3", got)
	}
	mu.Lock()
	defer mu.Unlock()
	// Backoff from 100 ms, doubling, ±50 %: [50, 150] ms then [100, 300] ms.
	if len(sleeps) != 2 || sleeps[0] < 50*time.Millisecond || sleeps[0] > 150*time.Millisecond ||
		sleeps[1] < 100*time.Millisecond || sleeps[1] > 300*time.Millisecond {
		t.Errorf("waits between attempts = %v", sleeps)
	}
	if ids := s.got(); len(ids) != 3 || ids[0].ID() != ids[2].ID() {
		t.Errorf("a retry is not the same event (same id): %v", ids)
	}
}

// TestHonoursRetryAfter: a 429 with Retry-After waits that long before
// the next attempt, up to the longest backoff.
func TestHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		retryAfter string
		want       time.Duration
	}{
		{"within the longest backoff", "7", 7 * time.Second},
		{"capped at the longest backoff", "3600", 30 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) == 1 {
					w.Header().Set("Retry-After", tc.retryAfter)
					w.WriteHeader(http.StatusTooManyRequests)
				}
			}))
			t.Cleanup(srv.Close)
			c := &counter{}
			slept := make(chan time.Duration, 10)
			n := webhook.New([]webhook.Receiver{{URL: srv.URL, Secret: secret, Events: all}}, webhook.WithCounter(c),
				webhook.WithRetries(3, 100*time.Millisecond, 30*time.Second),
				webhook.WithSleep(func(ctx context.Context, d time.Duration) error { slept <- d; return ctx.Err() }))
			start(t, n)
			n.Notify([]fleet.Event{ev(fleet.EventFleetStop, stop)})
			waitFor(t, "a delivery", func() bool { return c.get(webhook.Delivered) == 1 })
			if got := <-slept; got != tc.want {
				t.Errorf("waited %v after Retry-After: %s, want %v", got, tc.retryAfter, tc.want)
			}
		})
	}
}

func TestRefusedIsNotRetried(t *testing.T) {
	t.Parallel()
	s := newSink(t, func(int) int { return http.StatusBadRequest })
	c := &counter{}
	n := webhook.New([]webhook.Receiver{{URL: s.srv.URL, Secret: secret, Events: all}}, webhook.WithCounter(c), webhook.WithSleep(noSleep))
	start(t, n)
	n.Notify([]fleet.Event{ev(fleet.EventBudgetExhausted, key)})
	waitFor(t, "a failure", func() bool { return c.get(webhook.Failed) == 1 })
	if got := s.calls.Load(); got != 1 {
		t.Errorf("attempts = %d, want 1 (a 400 is final)", got)
	}
}

// downURL is the address of a listener that was closed: nothing answers.
func downURL(t *testing.T) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return "http://" + addr + "/hook"
}

func TestReceiverDownRetriesThenDrops(t *testing.T) {
	t.Parallel()
	c := &counter{}
	var attempts atomic.Int32
	n := webhook.New([]webhook.Receiver{{URL: downURL(t), Secret: secret, Events: all}}, webhook.WithCounter(c),
		webhook.WithRetries(4, time.Millisecond, time.Millisecond),
		webhook.WithSleep(func(ctx context.Context, _ time.Duration) error { attempts.Add(1); return ctx.Err() }))
	start(t, n)
	n.Notify([]fleet.Event{ev(fleet.EventFleetStop, stop)})
	waitFor(t, "the event given up", func() bool { return c.get(webhook.Failed) == 1 })
	if got := attempts.Load(); got != 3 {
		t.Errorf("waits = %d, want 3 (4 attempts)", got)
	}
	if c.get(webhook.Delivered) != 0 {
		t.Error("delivered to nobody")
	}
}

// TestNotifyNeverBlocks: with the receiver hanging, Notify still returns
// at once; what the queue cannot hold is dropped and counted.
func TestNotifyNeverBlocks(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(hang.Close)
	t.Cleanup(func() { close(release) })
	c := &counter{}
	n := webhook.New([]webhook.Receiver{{URL: hang.URL, Secret: secret, Events: all}}, webhook.WithCounter(c),
		webhook.WithQueueSize(4), webhook.WithSleep(noSleep))
	start(t, n)
	began := time.Now()
	for i := range 100 {
		n.Notify([]fleet.Event{ev(fleet.EventFleetStop, fleet.Key{Scope: fleet.ScopeAuth, Tenant: "t", Provider: "p", KeyID: string(rune('a' + i%26))})})
	}
	if took := time.Since(began); took > time.Second {
		t.Errorf("100 Notify calls took %v with the receiver hanging", took)
	}
	// One in flight, four queued, the rest dropped.
	waitFor(t, "the drops counted", func() bool { return c.get(webhook.Dropped) >= 95 })
	if got := c.get(webhook.Dropped); got > 96 {
		t.Errorf("dropped %d of 100 with a queue of 4", got)
	}
}

// TestRunStopsWhileRetrying: a stop ends Run even while it waits to retry.
func TestRunStopsWhileRetrying(t *testing.T) {
	t.Parallel()
	c := &counter{}
	n := webhook.New([]webhook.Receiver{{URL: downURL(t), Secret: secret, Events: all}}, webhook.WithCounter(c),
		webhook.WithRetries(10, time.Hour, time.Hour))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); n.Run(ctx) }()
	n.Notify([]fleet.Event{ev(fleet.EventFleetStop, stop)})
	time.Sleep(50 * time.Millisecond) // the first attempt fails at once, then it waits an hour
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

func TestDataIsJSON(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(webhook.Data{Event: "key_stopped", FleetEvent: "fleet_stop", Tenant: "t", Bucket: "b", Scope: "auth"})
	if err != nil || string(b) != `{"event":"key_stopped","fleet_event":"fleet_stop","tenant":"t","bucket":"b","scope":"auth"}` {
		t.Errorf("%s, %v", b, err)
	}
}
