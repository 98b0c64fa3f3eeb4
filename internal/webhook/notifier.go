package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"

	"github.com/policyd/policyd/internal/fleet"
)

// SignatureHeader carries "sha256=" and the hex HMAC-SHA256 of the request
// body under the receiver's secret. A receiver recomputes it over the raw
// body and compares in constant time.
const SignatureHeader = "Policyd-Signature"

// ContentType is the structured-mode CloudEvents media type of the body.
const ContentType = "application/cloudevents+json"

// EventTypePrefix prefixes the CloudEvents type: "dev.policyd.fleet." and
// the event's name, e.g. dev.policyd.fleet.breaker_opened.
const EventTypePrefix = "dev.policyd.fleet."

// Defaults of the Options.
const (
	// DefaultQueueSize bounds each receiver's queue of undelivered events.
	DefaultQueueSize = 256
	// DefaultMaxAttempts is how many times an event is sent before it is
	// given up (about half a minute of retries with the default backoff).
	DefaultMaxAttempts = 6
	// DefaultInitialBackoff and DefaultMaxBackoff shape the waits between
	// attempts: doubling from the first, capped at the second, each
	// randomised by ±50 % so that replicas do not retry in step.
	DefaultInitialBackoff = time.Second
	DefaultMaxBackoff     = 30 * time.Second
	// DefaultTimeout bounds one attempt, from connecting to the answer.
	DefaultTimeout = 10 * time.Second
)

// Results counted by a Counter.
const (
	// Delivered: the receiver answered 2xx.
	Delivered = "delivered"
	// Dropped: the receiver's queue was full; the event was never sent.
	Dropped = "dropped"
	// Failed: every attempt failed, or the receiver refused the event
	// with a 4xx other than 408 and 429.
	Failed = "failed"
)

// Receiver is where events go.
type Receiver struct {
	// URL receives a POST per event.
	URL string
	// Secret signs each body (SignatureHeader).
	Secret []byte
	// Events are the event names delivered (breaker_opened, key_stopped,
	// budget_exhausted, incident_resolved).
	Events []string
}

// Counter counts events by result (Delivered, Dropped, Failed), once per
// receiver: internal/metrics implements it.
type Counter interface{ WebhookEvent(result string) }

// SleepFunc waits d or until ctx ends, returning ctx's error then.
type SleepFunc func(ctx context.Context, d time.Duration) error

// Option configures New.
type Option func(*Notifier)

// WithSource names this replica in the events' source (/policyd/REPLICA);
// default /policyd.
func WithSource(replica string) Option {
	return func(n *Notifier) {
		if replica != "" {
			n.source = "/policyd/" + url.PathEscape(replica)
		}
	}
}

// WithCounter counts every event's result in c.
func WithCounter(c Counter) Option { return func(n *Notifier) { n.counter = c } }

// WithLogger logs failed attempts and dropped events to l (default: none).
func WithLogger(l *slog.Logger) Option { return func(n *Notifier) { n.logger = l } }

// WithHTTPClient sends with c (default: a client of its own with
// DefaultTimeout, whose idle connections Run closes when it returns).
func WithHTTPClient(c *http.Client) Option { return func(n *Notifier) { n.client = c } }

// WithQueueSize bounds each receiver's queue (default DefaultQueueSize).
func WithQueueSize(size int) Option { return func(n *Notifier) { n.queueSize = max(size, 1) } }

// WithRetries sets the attempts per event and the backoff between them
// (defaults DefaultMaxAttempts, DefaultInitialBackoff, DefaultMaxBackoff).
func WithRetries(attempts int, initial, maxBackoff time.Duration) Option {
	return func(n *Notifier) {
		n.maxAttempts, n.initialBackoff, n.maxBackoff = max(attempts, 1), initial, maxBackoff
	}
}

// WithSleep replaces the wait between attempts, so tests need not sleep.
func WithSleep(s SleepFunc) Option { return func(n *Notifier) { n.sleep = s } }

// Notifier delivers fleet events to receivers. Make one with New, feed it
// with Notify (from the fleet's sink) and run it with Run.
type Notifier struct {
	receivers []*receiver
	source    string
	counter   Counter
	logger    *slog.Logger
	client    *http.Client
	sleep     SleepFunc

	queueSize                  int
	maxAttempts                int
	initialBackoff, maxBackoff time.Duration

	mu   sync.Mutex
	open map[fleet.Key]bool // buckets whose breaker opened and has not closed: one breaker_opened per incident
}

type receiver struct {
	Receiver
	events map[string]bool
	queue  chan delivery
}

// delivery is one event, encoded once for all receivers.
type delivery struct {
	name string // breaker_opened, ...
	id   string
	body []byte
}

// maxOpen bounds the buckets remembered as open; past it a re-opening
// breaker may be pushed twice, which beats growing without limit.
const maxOpen = 100_000

// New returns a Notifier for receivers.
func New(receivers []Receiver, opts ...Option) *Notifier {
	n := &Notifier{
		source: "/policyd", logger: slog.New(slog.DiscardHandler),
		client:    &http.Client{Timeout: DefaultTimeout, Transport: http.DefaultTransport.(*http.Transport).Clone()},
		sleep:     sleepCtx,
		queueSize: DefaultQueueSize, maxAttempts: DefaultMaxAttempts,
		initialBackoff: DefaultInitialBackoff, maxBackoff: DefaultMaxBackoff,
		open: map[fleet.Key]bool{},
	}
	for _, o := range opts {
		o(n)
	}
	for _, r := range receivers {
		rc := &receiver{Receiver: r, events: map[string]bool{}, queue: make(chan delivery, n.queueSize)}
		for _, e := range r.Events {
			rc.events[e] = true
		}
		n.receivers = append(n.receivers, rc)
	}
	return n
}

// eventName maps a fleet transition to the webhook event it is, if any.
func (n *Notifier) eventName(e fleet.Event) string {
	bucket := e.Key // the tenant's bucket: Key.String leaves the tenant out
	n.mu.Lock()
	defer n.mu.Unlock()
	switch e.Kind {
	case fleet.EventBreakerOpen:
		if n.open[bucket] {
			return "" // re-opened after a probe: the same incident
		}
		if len(n.open) < maxOpen {
			n.open[bucket] = true
		}
		return "breaker_opened"
	case fleet.EventBreakerClose:
		delete(n.open, bucket)
		return "incident_resolved"
	case fleet.EventFleetStop:
		return "key_stopped"
	case fleet.EventBudgetExhausted:
		return "budget_exhausted"
	}
	return ""
}

// Notify queues events for the receivers that want them and returns at
// once: an event whose receiver's queue is full is dropped and counted. It
// has the fleet.Sink signature.
func (n *Notifier) Notify(events []fleet.Event) {
	for _, e := range events {
		name := n.eventName(e)
		if name == "" {
			continue
		}
		var d delivery
		for _, r := range n.receivers {
			if !r.events[name] {
				continue
			}
			if d.body == nil {
				var err error
				if d, err = n.encode(name, e); err != nil {
					n.logger.Error("webhook: encoding an event", "event", name, "err", err)
					break
				}
			}
			select {
			case r.queue <- d:
			default:
				n.count(Dropped)
				n.logger.Warn("webhook: queue full, event dropped", "url", r.URL, "event", name, "id", d.id)
			}
		}
	}
}

// Data is the JSON data of every event: the fleet transition, as the
// journal's fleet_events row has it.
type Data struct {
	Event      string           `json:"event"`       // the webhook event: breaker_opened, ...
	FleetEvent string           `json:"fleet_event"` // the fleet transition: breaker_open, ...
	Tenant     string           `json:"tenant"`
	Bucket     string           `json:"bucket"`
	Scope      string           `json:"scope"`
	Provider   string           `json:"provider,omitempty"`
	Model      string           `json:"model,omitempty"`
	KeyID      string           `json:"key_id,omitempty"`
	Reason     string           `json:"reason,omitempty"`
	ClientID   string           `json:"client_id,omitempty"`
	Counts     map[string]int64 `json:"counts,omitempty"`
}

func (n *Notifier) encode(name string, e fleet.Event) (delivery, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return delivery{}, err
	}
	ce := event.New()
	ce.SetID(id.String())
	ce.SetSource(n.source)
	ce.SetType(EventTypePrefix + name)
	ce.SetSubject(e.Key.String())
	ce.SetTime(e.At)
	data := Data{Event: name, FleetEvent: string(e.Kind), Tenant: e.Key.Tenant, Bucket: e.Key.String(), Scope: e.Key.Scope.String(),
		Provider: e.Key.Provider, Model: e.Key.Model, KeyID: e.Key.KeyID, Reason: e.Reason, ClientID: e.ClientID, Counts: e.Counts}
	if err := ce.SetData(event.ApplicationJSON, data); err != nil {
		return delivery{}, err
	}
	if err := ce.Validate(); err != nil {
		return delivery{}, err
	}
	body, err := json.Marshal(ce)
	if err != nil {
		return delivery{}, err
	}
	return delivery{name: name, id: ce.ID(), body: body}, nil
}

// Sign returns the SignatureHeader value of body under secret.
func Sign(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Run delivers the queued events, one worker per receiver, until ctx
// ends; events still queued then are not sent.
func (n *Notifier) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, r := range n.receivers {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case d := <-r.queue:
					n.count(n.deliver(ctx, r, d))
				}
			}
		})
	}
	wg.Wait()
	n.client.CloseIdleConnections()
}

// deliver sends d to r until it is accepted, refused, or out of attempts.
func (n *Notifier) deliver(ctx context.Context, r *receiver, d delivery) string {
	b := &backoff.ExponentialBackOff{InitialInterval: n.initialBackoff, RandomizationFactor: 0.5, Multiplier: 2, MaxInterval: n.maxBackoff}
	b.Reset()
	for attempt := 1; ; attempt++ {
		retry, hint, err := n.send(ctx, r, d)
		if err == nil {
			return Delivered
		}
		log := []any{"url", r.URL, "event", d.name, "id", d.id, "attempt", attempt, "err", err}
		if !retry || attempt >= n.maxAttempts {
			n.logger.Warn("webhook: event not delivered", log...)
			return Failed
		}
		n.logger.Debug("webhook: attempt failed, retrying", log...)
		if n.sleep(ctx, max(b.NextBackOff(), min(hint, n.maxBackoff))) != nil {
			return Failed // stopping
		}
	}
}

// send makes one attempt; retry says whether another may succeed, and
// hint how long the receiver asked to wait first (Retry-After in seconds,
// on a 429 or 503), which the next wait honours up to the longest backoff.
func (n *Notifier) send(ctx context.Context, r *receiver, d delivery) (retry bool, hint time.Duration, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL, bytes.NewReader(d.body))
	if err != nil {
		return false, 0, err
	}
	req.Header.Set("Content-Type", ContentType)
	req.Header.Set(SignatureHeader, Sign(r.Secret, d.body))
	resp, err := n.client.Do(req)
	if err != nil {
		return ctx.Err() == nil, 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // so the connection is reused
	resp.Body.Close()
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		return false, 0, nil
	case code == http.StatusTooManyRequests, code == http.StatusServiceUnavailable:
		if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
			hint = time.Duration(secs) * time.Second
		}
		return true, hint, fmt.Errorf("HTTP %d", code)
	case code == http.StatusRequestTimeout, code >= 500:
		return true, 0, fmt.Errorf("HTTP %d", code)
	default:
		return false, 0, fmt.Errorf("HTTP %d (refused, not retried)", code)
	}
}

func (n *Notifier) count(result string) {
	if n.counter != nil {
		n.counter.WebhookEvent(result)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
