// Package statuspage is the daemon's read-only status page, for a person:
// every bucket of the caller's tenant with its state, the open and recent
// incidents each with a timeline chart, and the recent failed contexts with
// their error reports. It is plain server-rendered HTML with inline SVG (no
// script, no external asset), served on the metrics address.
//
// It reads what the gRPC API shows, through the same handlers (FleetSource
// and JournalSource are the FleetService and JournalService servers), so
// the page and the API never disagree, and it needs no database driver.
package statuspage

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

// FleetSource answers what FleetService does: the buckets, the incidents.
type FleetSource interface {
	ListBuckets(context.Context, *policydv1.ListBucketsRequest) (*policydv1.ListBucketsResponse, error)
	ListIncidents(context.Context, *policydv1.ListIncidentsRequest) (*policydv1.ListIncidentsResponse, error)
	GetIncident(context.Context, *policydv1.GetIncidentRequest) (*policydv1.GetIncidentResponse, error)
}

// JournalSource answers what JournalService does: contexts and their error
// reports.
type JournalSource interface {
	ListContexts(context.Context, *policydv1.ListContextsRequest) (*policydv1.ListContextsResponse, error)
	GetErrorReport(context.Context, *policydv1.GetErrorReportRequest) (*policydv1.GetErrorReportResponse, error)
}

// Authenticator puts the caller's tenant into a call's context from its
// "authorization: Bearer TOKEN" metadata (*auth.Authenticator), or fails.
type Authenticator interface {
	Authenticate(ctx context.Context) (context.Context, error)
}

// What the page shows at most: a screen, not an export.
const (
	maxBuckets         = 200
	maxIncidents       = 10
	maxFailed          = 10
	recentIncidents    = 24 * time.Hour
	maxEventsPerChart  = 40
	refreshEverySecond = 10
)

// Page serves the status page. Build it with New.
type Page struct {
	fleet   FleetSource
	journal JournalSource
	auth    Authenticator // nil: no authentication
	clock   func() time.Time
	logger  *slog.Logger
}

// Option configures a Page.
type Option func(*Page)

// WithAuth requires each request to carry a credential auth accepts: a
// bearer token in "Authorization: Bearer TOKEN", or as the password of
// HTTP basic authentication (what a browser asks for; any user name). The
// page then shows that tenant's state only.
func WithAuth(auth Authenticator) Option { return func(p *Page) { p.auth = auth } }

// WithClock sets the clock the page's "ago" texts read (default time.Now).
func WithClock(now func() time.Time) Option { return func(p *Page) { p.clock = now } }

// WithLogger logs the sources' unexpected errors (default: discarded).
func WithLogger(l *slog.Logger) Option { return func(p *Page) { p.logger = l } }

// New returns the page over fleet and journal.
func New(fleet FleetSource, journal JournalSource, opts ...Option) *Page {
	p := &Page{fleet: fleet, journal: journal, clock: time.Now, logger: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(p)
	}
	return p
}

//go:embed page.html
var pageHTML string

var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"when":  func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
	"clock": func(t time.Time) string { return t.UTC().Format("15:04:05") },
	"dur":   humanDuration,
	"pct":   func(f float64) string { return fmt.Sprintf("%.0f %%", 100*f) },
}).Parse(pageHTML))

// ServeHTTP renders the page for the caller's tenant.
func (p *Page) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx, err := p.authenticate(r)
	if err != nil {
		w.Header().Set("WWW-Authenticate", `Basic realm="policyd", charset="UTF-8"`)
		http.Error(w, "policyd status: "+err.Error()+" (send the daemon's bearer token: Authorization: Bearer TOKEN, or as the password of basic authentication)", http.StatusUnauthorized)
		return
	}
	v := p.view(ctx)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	// Nothing on the page loads from elsewhere or runs.
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	if err := pageTemplate.Execute(w, v); err != nil {
		p.logger.Warn("status page: render", "error", err)
	}
}

// authenticate returns the request's context carrying the caller's tenant.
func (p *Page) authenticate(r *http.Request) (context.Context, error) {
	if p.auth == nil {
		return r.Context(), nil
	}
	token := ""
	if _, pass, ok := r.BasicAuth(); ok {
		token = pass
	} else if scheme, rest, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "bearer") {
		token = strings.TrimSpace(rest)
	}
	if token == "" {
		return nil, errors.New("missing credentials")
	}
	ctx := metadata.NewIncomingContext(r.Context(), metadata.Pairs("authorization", "Bearer "+token))
	ctx, err := p.auth.Authenticate(ctx)
	if err != nil {
		return nil, errors.New("invalid credentials")
	}
	return ctx, nil
}

// view is what the template renders.
type view struct {
	Now             time.Time
	RefreshSeconds  int
	Buckets         []bucketRow
	BucketsMore     bool
	BucketsErr      string
	InTrouble       int
	Incidents       []incidentView
	IncidentsErr    string
	Failed          []failedView
	FailedErr       string
	IncidentsWindow string
}

type bucketRow struct {
	Name, Scope, State, StateClass, Hold, Stop, Reason string
	Budget, Admit                                      string
	WindowFailures, WindowClients                      int32
	Trouble                                            bool
}

type incidentView struct {
	ID                                            int64
	Bucket, Status, StatusClass, Doing            string
	StartedAt, FirstFailureAt                     time.Time
	FirstClient, FirstAgent, FirstType, FirstRule string
	FirstReason                                   string
	Recovery                                      string
	Counts                                        []countView
	Chart                                         *chart
	Events                                        []eventView
	EventsMore                                    int
	Err                                           string
}

type countView struct {
	Label string
	Value int64
}

type eventView struct {
	At                    time.Time
	Event, Reason, Client string
	EventClass, Offset    string
}

type failedView struct {
	ContextID, Agent, Provider, Model string
	FinishedAt                        time.Time
	Attempts                          int32
	RootCause, Rule, Message          string
	Recovery, ManualAction, Text      string
	Unrecoverable                     bool
	Err                               string
}

func (p *Page) view(ctx context.Context) *view {
	now := p.clock()
	v := &view{Now: now, RefreshSeconds: refreshEverySecond, IncidentsWindow: humanDuration(recentIncidents)}
	p.buckets(ctx, v)
	p.incidents(ctx, v, now)
	p.failed(ctx, v)
	return v
}

func (p *Page) buckets(ctx context.Context, v *view) {
	req := &policydv1.ListBucketsRequest{PageSize: maxBuckets}
	resp, err := p.fleet.ListBuckets(ctx, req)
	if err != nil {
		v.BucketsErr = p.explain("buckets", err)
		return
	}
	v.BucketsMore = resp.GetNextPageToken() != ""
	for _, b := range resp.GetBuckets() {
		v.Buckets = append(v.Buckets, bucketRowOf(b))
	}
	// The buckets in trouble first, each group by name (as listed).
	slices.SortStableFunc(v.Buckets, func(a, b bucketRow) int {
		switch {
		case a.Trouble && !b.Trouble:
			return -1
		case b.Trouble && !a.Trouble:
			return 1
		}
		return 0
	})
	for _, b := range v.Buckets {
		if b.Trouble {
			v.InTrouble++
		}
	}
}

func bucketRowOf(b *policydv1.Bucket) bucketRow {
	st := b.GetState()
	row := bucketRow{Name: st.GetBucket(), Scope: b.GetScope(), Reason: st.GetReason(),
		WindowFailures: b.GetWindowFailures(), WindowClients: b.GetWindowClients(),
		Budget: fmt.Sprintf("%.1f", st.GetBudgetTokens()), Admit: fmt.Sprintf("%.0f %%", 100*b.GetAdmitFraction())}
	switch st.GetBreaker() {
	case policydv1.BreakerState_BREAKER_STATE_OPEN:
		row.State, row.StateClass, row.Trouble = "breaker open", "bad", true
		if d := st.GetOpenRemaining().AsDuration(); d > 0 {
			row.State += ", " + humanDuration(d) + " left"
		}
	case policydv1.BreakerState_BREAKER_STATE_HALF_OPEN:
		row.State, row.StateClass, row.Trouble = "breaker half-open: probing", "warn", true
	default:
		row.State, row.StateClass = "ok", "ok"
	}
	if d := st.GetHoldRemaining().AsDuration(); d > 0 {
		row.Hold, row.Trouble = "holding "+humanDuration(d), true
		if row.StateClass == "ok" {
			row.State, row.StateClass = "holding retries", "warn"
		}
	}
	if st.GetStopped() {
		row.Stop, row.Trouble = "key stopped", true
		row.State, row.StateClass = "key stopped", "bad"
	}
	if st.GetBudgetExhausted() {
		row.Budget += " (spent)"
		row.Trouble = true
		if row.StateClass == "ok" {
			row.State, row.StateClass = "retry budget spent", "warn"
		}
	}
	return row
}

func (p *Page) incidents(ctx context.Context, v *view, now time.Time) {
	open, err := p.fleet.ListIncidents(ctx, &policydv1.ListIncidentsRequest{OpenOnly: true, PageSize: maxIncidents})
	if err != nil {
		v.IncidentsErr = p.explain("incidents", err)
		return
	}
	recent, err := p.fleet.ListIncidents(ctx, &policydv1.ListIncidentsRequest{
		Since: timestampOf(now.Add(-recentIncidents)), PageSize: maxIncidents})
	if err != nil {
		v.IncidentsErr = p.explain("incidents", err)
		return
	}
	seen := map[int64]bool{}
	var list []*policydv1.Incident
	for _, in := range append(open.GetIncidents(), recent.GetIncidents()...) {
		if !seen[in.GetId()] && len(list) < maxIncidents {
			seen[in.GetId()] = true
			list = append(list, in)
		}
	}
	for _, in := range list {
		iv := incidentViewOf(in, now)
		d, err := p.fleet.GetIncident(ctx, &policydv1.GetIncidentRequest{Id: in.GetId()})
		if err != nil {
			iv.Err = p.explain("the incident's timeline", err)
		} else {
			iv.Chart = newChart(d.GetActivity(), in.GetId())
			iv.Events, iv.EventsMore = eventsOf(d.GetEvents(), in.GetStartedAt().AsTime())
		}
		v.Incidents = append(v.Incidents, iv)
	}
}

func incidentViewOf(in *policydv1.Incident, now time.Time) incidentView {
	ff := in.GetFirstFailure()
	iv := incidentView{ID: in.GetId(), Bucket: in.GetBucket(), StartedAt: in.GetStartedAt().AsTime(),
		FirstFailureAt: ff.GetAt().AsTime(), FirstClient: ff.GetClientId(), FirstAgent: ff.GetAgent(), FirstRule: ff.GetRule(),
		FirstReason: in.GetFirstReason()}
	if t := ff.GetFailureType(); t != policydv1.FailureType_FAILURE_TYPE_UNSPECIFIED {
		iv.FirstType = strings.TrimPrefix(t.String(), "FAILURE_TYPE_")
	}
	var doing []string
	switch in.GetBreaker() {
	case policydv1.BreakerState_BREAKER_STATE_OPEN:
		doing = append(doing, "breaker open: retries are parked or sent elsewhere, and the clients' gates hold first attempts")
	case policydv1.BreakerState_BREAKER_STATE_HALF_OPEN:
		doing = append(doing, "breaker half-open: one probe a second tests whether the provider is back")
	}
	if in.GetHolds() > 0 && in.GetOpen() {
		doing = append(doing, "holding retries until the provider's Retry-After ends")
	}
	if in.GetStops() > 0 && in.GetOpen() {
		doing = append(doing, "the key is stopped for the fleet")
	}
	switch {
	case in.GetOpen():
		iv.Status, iv.StatusClass = "in trouble since "+humanDuration(now.Sub(iv.FirstFailureAt))+" ago", "bad"
		if len(doing) == 0 {
			doing = append(doing, "watching the bucket")
		}
		iv.Doing = "policyd now: " + strings.Join(doing, "; ")
	case in.GetRecoveredAt() != nil:
		iv.Status, iv.StatusClass = "recovered "+humanDuration(now.Sub(in.GetRecoveredAt().AsTime()))+" ago", "ok"
		iv.Recovery = humanDuration(in.GetTimeToRecovery().AsDuration())
	default:
		iv.Status, iv.StatusClass = "ended without a recovery seen (its daemon stopped with the breaker open)", "warn"
	}
	iv.Counts = []countView{
		{"breaker openings", int64(in.GetBreakerOpens())}, {"holds", int64(in.GetHolds())}, {"key stops", int64(in.GetStops())},
		{"failed attempts", in.GetFailedAttempts()}, {"retries held (parked)", in.GetRetriesHeld()},
		{"first attempts parked", in.GetFirstAttemptsParked()}, {"first attempts shed", in.GetFirstAttemptsShed()},
		{"of them fell back", in.GetFirstAttemptsFellBack()}, {"retries stopped", in.GetRetriesStopped()},
		{"retries fell back", in.GetRetriesFellBack()}, {"attempts avoided (estimate)", in.GetRetriesAvoided()},
	}
	return iv
}

func eventsOf(events []*policydv1.IncidentEvent, start time.Time) ([]eventView, int) {
	var out []eventView
	for i, e := range events {
		if i == maxEventsPerChart {
			return out, len(events) - i
		}
		at := e.GetAt().AsTime()
		out = append(out, eventView{At: at, Event: strings.ReplaceAll(e.GetEvent(), "_", " "), Reason: e.GetReason(),
			Client: e.GetClientId(), EventClass: eventClass(e.GetEvent()), Offset: "+" + humanDuration(at.Sub(start))})
	}
	return out, 0
}

func eventClass(event string) string {
	switch event {
	case "breaker_open", "fleet_stop":
		return "bad"
	case "breaker_half_open", "hold_set", "budget_exhausted", "shed":
		return "warn"
	case "breaker_close", "slow_start", "fleet_clear":
		return "ok"
	}
	return ""
}

func (p *Page) failed(ctx context.Context, v *view) {
	resp, err := p.journal.ListContexts(ctx, &policydv1.ListContextsRequest{Outcome: policydv1.Outcome_OUTCOME_FAILED, PageSize: maxFailed})
	if err != nil {
		v.FailedErr = p.explain("failed contexts", err)
		return
	}
	for _, c := range resp.GetContexts() {
		fv := failedView{ContextID: c.GetContextId(), Agent: c.GetAgent(), Provider: c.GetProvider(), Model: c.GetModel(),
			FinishedAt: c.GetFinishedAt().AsTime(), Attempts: c.GetAttemptCount()}
		r, err := p.journal.GetErrorReport(ctx, &policydv1.GetErrorReportRequest{ContextId: c.GetContextId()})
		if err != nil {
			fv.Err = p.explain("its error report", err)
		} else {
			rep := r.GetReport()
			fv.RootCause = strings.TrimPrefix(rep.GetRootCauseType().String(), "FAILURE_TYPE_")
			fv.Rule, fv.Message, fv.Recovery = rep.GetRootCauseRule(), rep.GetRootCauseMessage(), rep.GetRecoveryAction()
			fv.ManualAction, fv.Unrecoverable, fv.Text = rep.GetManualAction(), rep.GetUnrecoverable(), rep.GetText()
		}
		v.Failed = append(v.Failed, fv)
	}
}

// explain is a source's error as the page shows it: the API's message
// (e.g. "the journal is off: start policyd serve with --database-url").
func (p *Page) explain(what string, err error) string {
	msg := err.Error()
	if st, ok := status.FromError(err); ok {
		msg = st.Message()
	}
	p.logger.Debug("status page: a source failed", "what", what, "error", err)
	return fmt.Sprintf("%s unavailable: %s", what, msg)
}

// humanDuration is d rounded for a person: "850ms", "9.9s", "3m10s", "2h5m".
func humanDuration(d time.Duration) string {
	switch {
	case d < 0:
		d = 0
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
}

func timestampOf(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }
