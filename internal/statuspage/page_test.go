package statuspage_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/auth"
	"github.com/policyd/policyd/internal/auth/authtest"
	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/fleetevents"
	"github.com/policyd/policyd/internal/journal"
	"github.com/policyd/policyd/internal/journal/journaltest"
	"github.com/policyd/policyd/internal/policy"
	"github.com/policyd/policyd/internal/server"
	"github.com/policyd/policyd/internal/statuspage"
)

func TestMain(m *testing.M) { journaltest.Main(m) }

const tokenAcme = "acme-status-token-0123456789"

type clock struct{ ns atomic.Int64 }

func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// daemon is the parts of policyd the page reads, in process: fleet memory
// and a real journal on one clock, and the services over them.
type daemon struct {
	clock *clock
	fleet *fleet.Fleet
	ps    *server.PolicyServer
	fs    *server.FleetServer
	js    *server.JournalServer
}

func newDaemon(t *testing.T) *daemon {
	t.Helper()
	c := &clock{}
	// A minute ago: the incidents view measures open incidents up to the
	// database's now, which this clock must not pass.
	c.ns.Store(time.Now().Add(-time.Minute).Truncate(time.Second).UnixNano())
	store, err := journal.Open(context.Background(), journaltest.DatabaseURL(t), journal.WithClock(c.now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	events := store.FleetEventRecorder(journal.WithFleetBatch(1, 5*time.Millisecond))
	t.Cleanup(events.Close)
	f := fleet.New(policy.Builtin().Fleet, fleet.WithClock(c.now),
		fleet.WithSink(fleetevents.Sink(slog.New(slog.DiscardHandler), events, nil, "")))
	ps := server.NewPolicyServer(policy.Builtin(), server.WithClock(c.now), server.WithJournal(store, 2*time.Second), server.WithFleet(f))
	return &daemon{clock: c, fleet: f, ps: ps, fs: server.NewFleetServer(f, ps, server.WithIncidentJournal(store)),
		js: server.NewJournalServer(store, ps)}
}

// outage: three agents' calls to openai/gpt-4o fail with 503s until the
// breaker opens; one agent's run then ends on a revoked key.
func (d *daemon) outage(t *testing.T, ctx context.Context) (contexts []string) {
	t.Helper()
	for i := range 24 {
		agent := []string{"agent-a", "agent-b", "agent-c"}[i%3]
		b, err := d.js.BeginContext(ctx, &policydv1.BeginContextRequest{Agent: agent, Provider: "openai", Model: "gpt-4o", Operation: "chat"})
		if err != nil {
			t.Fatal(err)
		}
		id := b.GetContext().GetContextId()
		if _, err := d.ps.NextDelay(ctx, &policydv1.NextDelayRequest{ContextId: id, Attempt: 1, ClientId: agent,
			Failure: &policydv1.Failure{Provider: "openai", Model: "gpt-4o", HttpStatus: 503,
				Body: `{"error":{"message":"The server is overloaded or not ready yet.","type":"server_error"}}`}}); err != nil {
			t.Fatal(err)
		}
		contexts = append(contexts, id)
		d.clock.advance(100 * time.Millisecond)
	}
	failed := contexts[len(contexts)-1]
	if _, err := d.ps.NextDelay(ctx, &policydv1.NextDelayRequest{ContextId: failed, Attempt: 2, ClientId: "agent-c",
		Failure: &policydv1.Failure{Provider: "openai", Model: "gpt-4o", HttpStatus: 401,
			Body: `{"error":{"message":"Incorrect API key provided","code":"invalid_api_key"}}`}}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.js.FinishContext(ctx, &policydv1.FinishContextRequest{ContextId: failed, Outcome: policydv1.Outcome_OUTCOME_FAILED}); err != nil {
		t.Fatal(err)
	}
	return contexts[:len(contexts)-1]
}

// get renders the page for r.
func get(t *testing.T, page http.Handler, r *http.Request) (int, string, http.Header) {
	t.Helper()
	w := httptest.NewRecorder()
	page.ServeHTTP(w, r)
	return w.Code, w.Body.String(), w.Header()
}

// untilPage renders the page until it contains every one of want (the
// fleet's events reach the journal in the background).
func untilPage(t *testing.T, page http.Handler, want ...string) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, body, _ := get(t, page, httptest.NewRequest(http.MethodGet, "/", nil))
		missing := ""
		for _, w := range want {
			if !strings.Contains(body, w) {
				missing = w
				break
			}
		}
		if code == http.StatusOK && missing == "" {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page never showed %q (status %d):\n%s", missing, code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestStatusPageAfterAnOutage renders the page against a real fleet and
// journal during an outage and after its recovery, and checks what a person
// reads there.
func TestStatusPageAfterAnOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDaemon(t)
	start := d.clock.now()
	contexts := d.outage(t, ctx)
	// A client's gate parks six first attempts, and sheds four, two of
	// them to the fallback.
	gpt4o := fleet.Target{Provider: "openai", Model: "gpt-4o"}
	d.fleet.Report(fleet.Usage{Target: gpt4o, ClientID: "gate-1", ParkedNew: 6, Shed: 4, FellBack: 2})
	page := statuspage.New(d.fs, d.js, statuspage.WithClock(d.clock.now))

	during := untilPage(t, page, "breaker open", "in trouble since", "policyd now: breaker open", "first attempts parked: <b>6</b>")
	for _, want := range []string{
		"<span>first attempts parked: <b>6</b></span><span>first attempts shed: <b>4</b></span><span>of them fell back: <b>2</b></span>",
		"<code>availability:openai/gpt-4o</code>",
		"first failure " + start.Format("2006-01-02 15:04:05 UTC") + " (OVERLOADED, rule overloaded) in a call of agent <code>agent-a</code>",
		`class="b-open"`,             // the chart's breaker band
		`class="s-failed"`,           // and its failed attempts
		"breaker open</td>",          // the timeline's events
		"AUTH_INVALID",               // the failed context's report
		"Fix the API credentials",    // its manual action
		"Incorrect API key provided", // its message
	} {
		if !strings.Contains(during, want) {
			t.Errorf("during the outage, the page lacks %q", want)
		}
	}
	if strings.Contains(during, "<script") || regexp.MustCompile(`(src|href)="https?:`).MatchString(during) {
		t.Error("the page has a script or an external asset")
	}

	// The provider is back: the breaker half-opens, the gate's probes
	// succeed and close it; the parked calls get through.
	d.clock.advance(5 * time.Second)
	d.fleet.Tick()
	d.fleet.Report(fleet.Usage{Target: gpt4o, ClientID: "gate-1", Admitted: 2, Succeeded: 2})
	for _, id := range contexts[:6] {
		if _, err := d.js.FinishContext(ctx, &policydv1.FinishContextRequest{ContextId: id, Outcome: policydv1.Outcome_OUTCOME_RESOLVED}); err != nil {
			t.Fatal(err)
		}
	}
	after := untilPage(t, page, "recovered after 7.4s")
	for _, want := range []string{
		`<span class="pill ok">recovered`,
		`class="b-closed"`,
		`class="s-resolved"`,
		"breaker close</td>",
	} {
		if !strings.Contains(after, want) {
			t.Errorf("after the recovery, the page lacks %q", want)
		}
	}
	if strings.Contains(after, "in trouble since") || strings.Contains(after, `<td class="state">breaker`) {
		t.Error("after the recovery, the page still says the bucket is in trouble, or its breaker not closed")
	}
}

func TestStatusPageAuthentication(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDaemon(t)
	d.outage(t, ctx)
	tokens, err := auth.LoadTokens(authtest.TokensFile(t, [2]string{"acme", tokenAcme}))
	if err != nil {
		t.Fatal(err)
	}
	page := statuspage.New(d.fs, d.js, statuspage.WithAuth(auth.NewTokenAuthenticator(tokens)))

	code, _, h := get(t, page, httptest.NewRequest(http.MethodGet, "/", nil))
	if code != http.StatusUnauthorized || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Basic") {
		t.Errorf("without credentials: %d, WWW-Authenticate %q; want 401 asking for basic authentication", code, h.Get("WWW-Authenticate"))
	}
	wrong := httptest.NewRequest(http.MethodGet, "/", nil)
	wrong.Header.Set("Authorization", "Bearer not-the-token-0123456789")
	if code, body, _ := get(t, page, wrong); code != http.StatusUnauthorized || strings.Contains(body, "gpt-4o") {
		t.Errorf("a wrong token: %d, want 401 and nothing of the fleet", code)
	}
	// acme's token, either way: the page shows acme's state, and the
	// outage (of tenant "", the in-process calls') is not acme's.
	bearer := httptest.NewRequest(http.MethodGet, "/", nil)
	bearer.Header.Set("Authorization", "Bearer "+tokenAcme)
	basic := httptest.NewRequest(http.MethodGet, "/", nil)
	basic.SetBasicAuth("anyone", tokenAcme)
	for name, r := range map[string]*http.Request{"bearer": bearer, "basic": basic} {
		code, body, _ := get(t, page, r)
		if code != http.StatusOK || !strings.Contains(body, "No bucket has state") || strings.Contains(body, "gpt-4o") {
			t.Errorf("%s: %d; want 200 and acme's (empty) fleet only:\n%s", name, code, body)
		}
	}
}
