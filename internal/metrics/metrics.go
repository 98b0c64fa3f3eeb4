package metrics

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/enums"
	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/journal"
	"github.com/policyd/policyd/internal/server"
	"github.com/policyd/policyd/internal/webhook"
)

// MaxProfiles bounds the profile label of policyd_decisions_total: profiles
// beyond that many distinct names count under profile="other". A policy
// has a handful; the bound only guards the registry against a policy file
// that grows without limit across reloads.
const MaxProfiles = 100

// Metrics holds policyd's metrics on a registry of its own. It is a
// server.DecisionObserver and a journal.Observer; its methods are safe for
// concurrent use. Make one with New.
type Metrics struct {
	reg  *prometheus.Registry
	grpc *grpcprom.ServerMetrics

	decisions     *prometheus.CounterVec
	profiles      atomic.Pointer[map[string]*profileCounters] // copy-on-write: read on every NextDelay
	profilesMu    sync.Mutex                                  // serialises additions to profiles
	journaled     prometheus.Counter
	dropped       prometheus.Counter
	batchSize     prometheus.Histogram
	commitSeconds prometheus.Histogram
	batchFailures prometheus.Counter
	fleetEvents   *prometheus.CounterVec
	webhooks      *prometheus.CounterVec
}

// The failure types and actions of the API, for the label values and the
// size of each profile's table of counters.
var (
	failureTypeCount = policydv1.FailureType(0).Descriptor().Values().Len()
	actionCount      = policydv1.Action(0).Descriptor().Values().Len()
)

// profileCounters are one profile's decision counters by failure type and
// action, resolved from the CounterVec on first use, so that a decision
// costs an atomic load and an increment rather than a label lookup.
type profileCounters struct {
	name  string
	cells []atomic.Pointer[counterCell] // failureTypeCount × actionCount
}

type counterCell struct{ c prometheus.Counter }

// New returns Metrics with every metric registered on a new registry.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		grpc: grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(
			// policyd answers in tens of microseconds, a journaled call
			// in a few milliseconds: the default buckets (5ms..10s)
			// would put nearly every call in the first one.
			grpcprom.WithHistogramBuckets([]float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}),
		)),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "policyd_decisions_total",
			Help: "NextDelay decisions by profile, failure type and action (RETRY, STOP, FALL_BACK).",
		}, []string{"profile", "failure_type", "action"}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "policyd_journal_batch_size",
			Help:    "Record calls committed per journal transaction.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 9), // 1..256, the largest batch
		}),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "policyd_journal_commit_seconds",
			Help:    "Time a committed journal batch took, from begin to commit.",
			Buckets: prometheus.ExponentialBuckets(.00025, 2, 15), // 0.25ms..4s
		}),
		batchFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "policyd_journal_batch_failures_total",
			Help: "Journal transactions that did not commit (database down, slow or refusing).",
		}),
		fleetEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "policyd_fleet_events_total",
			Help: "Fleet transitions by event: hold_set, breaker_open, breaker_half_open, breaker_close, budget_exhausted, fleet_stop, shed, slow_start, tenant_limit, fleet_clear, pace.",
		}, []string{"event"}),
		webhooks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "policyd_webhook_events_total",
			Help: "Webhook events by result, per receiver: delivered, dropped (the receiver's queue was full) or failed (refused, or every retry failed).",
		}, []string{"result"}),
	}
	for _, r := range []string{webhook.Delivered, webhook.Dropped, webhook.Failed} {
		m.webhooks.WithLabelValues(r) // present at 0, so a rate over them is defined from the start
	}
	journalTotal := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "policyd_nextdelay_journal_total",
		Help: "NextDelay calls that asked for the journal (a context_id with the journal on), by result: " +
			"journaled (committed) or dropped (answered journaled=false).",
	}, []string{"result"})
	m.journaled = journalTotal.WithLabelValues("journaled")
	m.dropped = journalTotal.WithLabelValues("dropped")
	m.profiles.Store(&map[string]*profileCounters{})
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.grpc, m.decisions, journalTotal, m.batchSize, m.commitSeconds, m.batchFailures, m.fleetEvents, m.webhooks,
	)
	return m
}

// Registry returns the registry the metrics are on, e.g. to add more.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// UnaryServerInterceptor returns the interceptor that counts and times
// unary calls: grpc_server_started_total, grpc_server_handled_total (by
// grpc_code) and grpc_server_handling_seconds. Install it with
// server.WithMonitoring, outside the status mapping.
func (m *Metrics) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return m.grpc.UnaryServerInterceptor()
}

// StreamServerInterceptor is UnaryServerInterceptor for streams (health
// Watch, reflection), with grpc_server_msg_{received,sent}_total.
func (m *Metrics) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return m.grpc.StreamServerInterceptor()
}

// Decided counts a NextDelay decision in policyd_decisions_total and, when
// the request asked for the journal, in policyd_nextdelay_journal_total.
func (m *Metrics) Decided(profile string, d *policydv1.Decision, j server.JournalResult) {
	switch j {
	case server.JournalCommitted:
		m.journaled.Inc()
	case server.JournalDropped:
		m.dropped.Inc()
	}
	ft := int(d.GetClassification().GetFailureType())
	act := int(d.GetAction())
	if ft < 0 || ft >= failureTypeCount {
		ft = int(policydv1.FailureType_FAILURE_TYPE_UNKNOWN)
	}
	if act < 0 || act >= actionCount {
		act = int(policydv1.Action_ACTION_UNSPECIFIED)
	}
	pc := m.profile(profile)
	cell := &pc.cells[ft*actionCount+act]
	if c := cell.Load(); c != nil {
		c.c.Inc()
		return
	}
	c := &counterCell{m.decisions.WithLabelValues(pc.name, enums.Short(policydv1.FailureType(ft)), enums.Short(policydv1.Action(act)))}
	cell.Store(c) // a racing first call stores an equal child: same labels, same counter
	c.c.Inc()
}

// profile returns the counters of the named profile, adding them on first
// use (past MaxProfiles, those of "other").
func (m *Metrics) profile(name string) *profileCounters {
	if pc, ok := (*m.profiles.Load())[name]; ok {
		return pc
	}
	m.profilesMu.Lock()
	defer m.profilesMu.Unlock()
	old := *m.profiles.Load()
	if pc, ok := old[name]; ok {
		return pc
	}
	label := name
	if len(old) >= MaxProfiles {
		label = "other"
		if pc, ok := old[label]; ok {
			return pc
		}
	}
	pc := &profileCounters{name: label, cells: make([]atomic.Pointer[counterCell], failureTypeCount*actionCount)}
	next := make(map[string]*profileCounters, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[label] = pc
	m.profiles.Store(&next)
	return pc
}

// BatchCommitted records a journal transaction: its size and duration in
// policyd_journal_batch_size and policyd_journal_commit_seconds when it
// committed, policyd_journal_batch_failures_total when not.
func (m *Metrics) BatchCommitted(size int, took time.Duration, err error) {
	if err != nil {
		m.batchFailures.Inc()
		return
	}
	m.batchSize.Observe(float64(size))
	m.commitSeconds.Observe(took.Seconds())
}

// ObserveJournal adds the gauges read from store at each scrape:
// policyd_journal_queue_depth (Record calls waiting for a batch) and
// policyd_journal_up (1 while the store is ready, 0 while its database is
// down or after it is closed). Call it once, after journal.Open with
// journal.WithObserver(m).
func (m *Metrics) ObserveJournal(store *journal.Store) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "policyd_journal_queue_depth",
			Help: "Record calls waiting in the journal writers' queues for a batch.",
		}, func() float64 { return float64(store.QueueDepth()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "policyd_journal_up",
			Help: "1 while the journal's database answers, 0 while it is down (NextDelay then answers journaled=false).",
		}, func() float64 {
			if store.Ready(context.Background()) == nil {
				return 1
			}
			return 0
		}),
	)
}

var (
	_ server.DecisionObserver = (*Metrics)(nil)
	_ journal.Observer        = (*Metrics)(nil)
	_ webhook.Counter         = (*Metrics)(nil)
)

// WebhookEvent counts a webhook event's result in
// policyd_webhook_events_total (a webhook.Counter).
func (m *Metrics) WebhookEvent(result string) { m.webhooks.WithLabelValues(result).Inc() }

// FleetEvent counts a fleet transition (hold_set, breaker_open, ...).
func (m *Metrics) FleetEvent(kind string) { m.fleetEvents.WithLabelValues(kind).Inc() }

// ObserveFleet exports fleet memory's state, read at each scrape: buckets,
// breakers by state, active holds and stops, exhausted budgets, the lowest
// retry budget, and the decisions the fleet changed by effect.
func (m *Metrics) ObserveFleet(f *fleet.Fleet) {
	m.reg.MustRegister(fleetCollector{f: f})
}

// ObserveFleetSync exports a shared fleet's syncer, read at each scrape:
// policyd_fleet_sync_up (1 while its rounds reach the database, 0 while
// this replica decides alone), policyd_fleet_replicas (this one and the
// others whose counts are fresh), the breaker transitions it proposed by
// result (won: it made the transition; lost: another replica had, and it
// took that one's state) and its failed rounds.
func (m *Metrics) ObserveFleetSync(s *fleet.Syncer) {
	m.reg.MustRegister(syncCollector{s: s})
}

var (
	fleetSyncUpDesc     = prometheus.NewDesc("policyd_fleet_sync_up", "1 while this replica's fleet is in step with the others through the database, 0 while it decides from its own state.", nil, nil)
	fleetReplicasDesc   = prometheus.NewDesc("policyd_fleet_replicas", "Replicas sharing the fleet: this one and the others whose counts are fresh.", nil, nil)
	fleetSyncMovesDesc  = prometheus.NewDesc("policyd_fleet_sync_transitions_total", "Breaker transitions this replica proposed, by result: won (it made it) or lost (another replica had).", []string{"result"}, nil)
	fleetSyncErrorsDesc = prometheus.NewDesc("policyd_fleet_sync_errors_total", "Sync rounds that failed to reach the database.", nil, nil)
	fleetSyncRoundsDesc = prometheus.NewDesc("policyd_fleet_sync_rounds_total", "Sync rounds run.", nil, nil)
)

type syncCollector struct{ s *fleet.Syncer }

func (c syncCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{fleetSyncUpDesc, fleetReplicasDesc, fleetSyncMovesDesc, fleetSyncErrorsDesc, fleetSyncRoundsDesc} {
		ch <- d
	}
}

func (c syncCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	up := 0.0
	if st.Up || st.Rounds == 0 {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(fleetSyncUpDesc, prometheus.GaugeValue, up)
	ch <- prometheus.MustNewConstMetric(fleetReplicasDesc, prometheus.GaugeValue, float64(st.Replicas))
	ch <- prometheus.MustNewConstMetric(fleetSyncMovesDesc, prometheus.CounterValue, float64(st.Won), "won")
	ch <- prometheus.MustNewConstMetric(fleetSyncMovesDesc, prometheus.CounterValue, float64(st.Lost), "lost")
	ch <- prometheus.MustNewConstMetric(fleetSyncErrorsDesc, prometheus.CounterValue, float64(st.Errors))
	ch <- prometheus.MustNewConstMetric(fleetSyncRoundsDesc, prometheus.CounterValue, float64(st.Rounds))
}

var (
	fleetBucketsDesc  = prometheus.NewDesc("policyd_fleet_buckets", "Buckets fleet memory holds state for.", nil, nil)
	fleetBreakersDesc = prometheus.NewDesc("policyd_fleet_breakers", "Circuit breakers by state (closed, open, half_open).", []string{"state"}, nil)
	fleetHoldsDesc    = prometheus.NewDesc("policyd_fleet_holds", "Buckets with a shared cooldown (hold) in force.", nil, nil)
	fleetStopsDesc    = prometheus.NewDesc("policyd_fleet_stops", "Keys stopped fleet-wide (revoked key, permission, exhausted quota).", nil, nil)
	fleetExhaustDesc  = prometheus.NewDesc("policyd_fleet_budget_exhausted", "Buckets whose retry budget is spent.", nil, nil)
	fleetTokensDesc   = prometheus.NewDesc("policyd_fleet_retry_tokens_min", "The lowest retry budget among the buckets, in retries.", nil, nil)
	fleetChangedDesc  = prometheus.NewDesc("policyd_fleet_decisions_total",
		"NextDelay decisions the fleet changed, by effect: hold (waited for a shared cooldown), stop (key stopped), circuit (breaker open), "+
			"probe (let through half-open), budget (budget spent), paced (waited for a budget token), deadline (the fleet's wait did not fit).",
		[]string{"effect"}, nil)
)

// The Coordinate streams' metrics, per provider and model (the
// availability bucket, summed over tenants: bounded by the models in use,
// where a key or tenant label would grow with every credential).
var (
	streamLabels           = []string{"provider", "model"}
	fleetStreamsDesc       = prometheus.NewDesc("policyd_fleet_streams", "Coordinate streams connected (one per client process).", nil, nil)
	fleetReportsDesc       = prometheus.NewDesc("policyd_fleet_stream_reports_total", "Usage reports received on Coordinate streams.", streamLabels, nil)
	fleetAssignmentsDesc   = prometheus.NewDesc("policyd_fleet_stream_assignments_total", "Assignments sent on Coordinate streams (pushes, answers and refreshes).", streamLabels, nil)
	fleetFirstAttemptsDesc = prometheus.NewDesc("policyd_fleet_first_attempts_total",
		"First attempts the clients' gates reported, by outcome: admitted (sent, after any hold) or shed (stopped or fallen back).", append(streamLabels, "outcome"), nil)
	fleetStreamClientsDesc = prometheus.NewDesc("policyd_fleet_streaming_clients", "Client processes that reported in the breaker's window.", streamLabels, nil)
	fleetAdmitDesc         = prometheus.NewDesc("policyd_fleet_admit_fraction", "The share of first attempts the gates admit now (slow start, quota pacing).", streamLabels, nil)
)

// fleetCollector reads the fleet at scrape time, so a decision pays nothing
// for the gauges.
type fleetCollector struct{ f *fleet.Fleet }

func (c fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{fleetBucketsDesc, fleetBreakersDesc, fleetHoldsDesc, fleetStopsDesc, fleetExhaustDesc, fleetTokensDesc, fleetChangedDesc,
		fleetStreamsDesc, fleetReportsDesc, fleetAssignmentsDesc, fleetFirstAttemptsDesc, fleetStreamClientsDesc, fleetAdmitDesc} {
		ch <- d
	}
}

func (c fleetCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.f.Stats()
	ch <- prometheus.MustNewConstMetric(fleetBucketsDesc, prometheus.GaugeValue, float64(s.Buckets))
	for state, n := range s.Breakers {
		ch <- prometheus.MustNewConstMetric(fleetBreakersDesc, prometheus.GaugeValue, float64(n), state.String())
	}
	ch <- prometheus.MustNewConstMetric(fleetHoldsDesc, prometheus.GaugeValue, float64(s.Holds))
	ch <- prometheus.MustNewConstMetric(fleetStopsDesc, prometheus.GaugeValue, float64(s.Stops))
	ch <- prometheus.MustNewConstMetric(fleetExhaustDesc, prometheus.GaugeValue, float64(s.BudgetExhausted))
	ch <- prometheus.MustNewConstMetric(fleetTokensDesc, prometheus.GaugeValue, s.MinTokens)
	for effect, n := range c.f.Effects() {
		ch <- prometheus.MustNewConstMetric(fleetChangedDesc, prometheus.CounterValue, float64(n), effect)
	}
	streams, perModel := c.f.StreamStats()
	ch <- prometheus.MustNewConstMetric(fleetStreamsDesc, prometheus.GaugeValue, float64(streams))
	for _, m := range perModel {
		ch <- prometheus.MustNewConstMetric(fleetReportsDesc, prometheus.CounterValue, float64(m.Reports), m.Provider, m.Model)
		ch <- prometheus.MustNewConstMetric(fleetAssignmentsDesc, prometheus.CounterValue, float64(m.Assignments), m.Provider, m.Model)
		ch <- prometheus.MustNewConstMetric(fleetFirstAttemptsDesc, prometheus.CounterValue, float64(m.Admitted), m.Provider, m.Model, "admitted")
		ch <- prometheus.MustNewConstMetric(fleetFirstAttemptsDesc, prometheus.CounterValue, float64(m.Shed), m.Provider, m.Model, "shed")
		ch <- prometheus.MustNewConstMetric(fleetStreamClientsDesc, prometheus.GaugeValue, float64(m.Clients), m.Provider, m.Model)
		ch <- prometheus.MustNewConstMetric(fleetAdmitDesc, prometheus.GaugeValue, m.AdmitFraction, m.Provider, m.Model)
	}
}
