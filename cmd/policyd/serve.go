package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"time"

	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/fleet/pgexchange"
	"github.com/policyd/policyd/internal/fleetevents"
	"github.com/policyd/policyd/internal/journal"
	"github.com/policyd/policyd/internal/metrics"
	"github.com/policyd/policyd/internal/policy"
	"github.com/policyd/policyd/internal/server"
	"github.com/policyd/policyd/internal/statuspage"
	"github.com/policyd/policyd/internal/telemetry"
	"github.com/policyd/policyd/internal/webhook"
)

// defaultListen is loopback only: policyd serves without authentication
// unless given --auth-tokens or --tls-client-ca, so exposing it beyond the
// host is an explicit choice.
const defaultListen = "127.0.0.1:7433"

// shutdownTimeout bounds how long a graceful stop waits for in-flight calls
// before closing their connections; classifications take microseconds, so
// only a stuck client hits it.
const shutdownTimeout = 10 * time.Second

// journalCloseTimeout bounds the journal's flush at shutdown, so that with
// shutdownTimeout the daemon exits within 15s, inside a 20s grace period: a
// writer's last transaction is itself bounded by the store's 5s timeout, so
// this is only hit by a database that hangs across retries. Its callers were
// answered already (journaled=false when the commit was late), so giving up
// loses nothing a client cannot record again.
const journalCloseTimeout = 5 * time.Second

const serveUsage = `Usage: policyd serve [flags]

Runs the gRPC daemon: policyd.v1.PolicyService, policyd.v1.JournalService,
policyd.v1.FleetService, grpc.health.v1.Health and server reflection. With
--database-url (or DATABASE_URL) it migrates that PostgreSQL database and
journals attempts there; without it the journal RPCs answer
FAILED_PRECONDITION. Logs go to stderr; once listening it logs
"serving" with the bound address (addr). SIGINT or SIGTERM stops it
gracefully: health turns NOT_SERVING, in-flight calls get up to 10s, the
journal writer commits what it holds (up to 5s more), and it exits 0.

Health (grpc.health.v1, and /readyz with --metrics-listen): "" and
policyd.v1.PolicyService are SERVING while the daemon runs, even while the
journal's database is down (NextDelay still answers, with journaled=false);
policyd.v1.JournalService is SERVING only while the journal's database
answers (an idle daemon checks every 5s), NOT_SERVING while it is down or
when there is no journal. All turn NOT_SERVING at shutdown.

With --metrics-listen (or POLICYD_METRICS_LISTEN; off by default) it serves
over HTTP on that address, without authentication: /metrics (Prometheus:
policyd_decisions_total, policyd_nextdelay_journal_total, policyd_journal_*,
policyd_fleet_*, grpc_server_*, go_*, process_*), /healthz (liveness) and
/readyz[?service=NAME] (200 when that health service is SERVING, else 503).
It also serves a read-only status page at / (and /status): the buckets,
the open and recent incidents with their timelines, the recent failed
contexts; with --auth-tokens it needs a token (Authorization: Bearer TOKEN,
or as a browser's basic-authentication password) and shows that tenant's.
--pprof adds Go's profiles (/debug/pprof/) to that address.

Fleet memory (--fleet on, the default; docs/fleet.md) shares each failure
with every agent on the same provider, model and key: shared cooldowns,
fleet-wide stops on a key, circuit breakers and retry budgets change
NextDelay's retries (Decision.fleet says how), each transition is logged
as "fleet ..." and, with a journal, recorded in fleet_events. Its settings
are the policy file's fleet: section. Clients keep one FleetService.Coordinate
stream per process: they report their counts about once a second and get
each bucket's assignment, which their gate applies to first attempts with
no RPC (docs/clients.md, "The fleet gate"). --fleet off answers every caller
as if alone (FleetService, Coordinate included, then answers
FAILED_PRECONDITION, and the clients' gates admit everything).

Replicas (--fleet-store postgres, the default with --database-url) share
one fleet through the journal's database: each decides from its own
memory, and exchanges holds, stops, breaker transitions (each made and
journaled by exactly one replica), probe slots and its counts with the
others in the background, woken by LISTEN/NOTIFY on a dedicated connection
(not through a transaction-mode pooler). While the database is away each
replica decides from its own state: health service policyd.fleet.sync and
policyd_fleet_sync_up say so, and clients see no error. --replica-id names
the replica (fleet_events.replica). --fleet-store memory keeps each
replica's fleet its own.

Every call gets a request id: the client's x-request-id when it is 1..128
printable ASCII characters, else a generated one. It is logged as
request_id and sent back in the x-request-id response header when the
client sent it, when the call failed, and at --log-level debug. The daemon
runs Go's garbage collector at GOGC=400 unless GOGC is set.

The policy is the built-in profiles and rules, plus the --policy file, under
the POLICYD_MAX_RETRY_DELAY, POLICYD_MAX_RETRY_ATTEMPTS,
POLICYD_MAX_PROVIDER_RETRY_AFTER and POLICYD_RETRY_IRREVERSIBLE caps in the
environment; a bad file at start exits 2. The file is reloaded on SIGHUP
and when it changes: a good new file takes effect ("policy reloaded"), a bad
one is logged and the policy in force stays.

Security: --tls-cert and --tls-key serve TLS; --tls-client-ca requires
client certificates signed by that CA (mutual TLS). --auth-tokens FILE
requires "authorization: Bearer TOKEN" on every call: each line of FILE is
"TENANT TOKEN" ('#' starts a comment); a missing or unknown token is
UNAUTHENTICATED. With mutual TLS and no tokens file, the tenant is the
client certificate's subject CN. Journal contexts belong to their tenant:
another tenant's are NOT_FOUND. Health and reflection need no token. SIGHUP
reloads the tokens file and the TLS files too (new connections get the new
certificates; a bad file is logged and what is in force stays).

Observability beyond /metrics: with OTEL_EXPORTER_OTLP_ENDPOINT (or the
per-signal OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, ..._METRICS_ENDPOINT) set,
every call is traced (the OTel gRPC instrumentation; NextDelay's span
carries the decision) and the spans and metrics are exported over OTLP
(OTEL_EXPORTER_OTLP_PROTOCOL http/protobuf or grpc), flushed at stop;
without them nothing is installed. The policy file's webhooks: section
pushes fleet transitions (breaker opened, key stopped, budget exhausted,
incident resolved) as CloudEvents signed with HMAC-SHA256
(Policyd-Signature), retried in the background: no decision waits on them.

Limits: a request over --max-message-bytes is RESOURCE_EXHAUSTED, and one
whose metadata is over --max-header-bytes is refused before it is decoded;
with --rate-limit each tenant gets that many calls per second (bursts of
--rate-burst; a stream is charged when it opens and for every message it
sends) and a call over it is RESOURCE_EXHAUSTED with a
grpc-retry-pushback-ms trailer; a journal call without a deadline gets
--request-timeout. Clients may send keepalive pings every 15s at most.

Admins: with authentication on, only callers of the --admin-tenants may
clear fleet state (FleetService.ClearBucket, 'policyd fleet clear'); others
are PERMISSION_DENIED. Without authentication every caller may.
`

// defaultGCPercent is the daemon's GOGC unless the environment sets one.
// policyd's live heap is a few MiB, so at Go's default of 100 a busy daemon
// collected ten times a second, and every collection shrank the stacks of
// the goroutines serving calls, which then grew them again: together a
// quarter of a Classify call's CPU. At 400 the heap peaks at a few tens of
// MiB.
const defaultGCPercent = 400

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	cfg, err := parseServeConfig(args, stdout, stderr)
	if err != nil {
		return err
	}
	return runDaemon(ctx, cfg)
}

// serveConfig is `policyd serve`'s configuration, parsed and checked: run
// starts from it and reads no flag or environment variable itself.
type serveConfig struct {
	listen        string
	metricsListen string // "": no HTTP endpoint
	profiling     bool
	policyFile    string
	policy        *policy.Policy
	logger        *slog.Logger

	databaseURL    string // "": the journal is off
	journalTimeout time.Duration
	journalOpts    []journal.Option
	abandonAfter   time.Duration // 0: contexts left in progress stay so

	fleetOn    bool
	fleetStore string // "memory" or "postgres"
	replicaID  string
	webhooks   []webhook.Receiver // the policy file's webhooks:, their secrets read

	telemetry telemetry.Config // what OTEL_EXPORTER_OTLP_* ask to export; nothing by default

	security server.Security
	admins   server.Admins
	sf       *securityFlags // for SIGHUP's reloads and the auth mode logged
}

// parseServeConfig reads serve's flags and environment; a bad value is a
// usage error naming the flag.
func parseServeConfig(args []string, stdout, stderr io.Writer) (*serveConfig, error) {
	fs := newFlagSet("serve", serveUsage)
	listen := fs.String("listen", envOr("POLICYD_LISTEN", defaultListen),
		"`address` to listen on, host:port; port 0 picks a free port (env POLICYD_LISTEN)")
	level := fs.String("log-level", envOr("POLICYD_LOG_LEVEL", "info"),
		"log `level`: debug, info, warn or error (env POLICYD_LOG_LEVEL)")
	format := fs.String("log-format", "text", "log `format`: text or json")
	policyFile := fs.String("policy", os.Getenv("POLICYD_POLICY"),
		"policy `file` adding to the built-in profiles and rules, reloaded on change and SIGHUP (env POLICYD_POLICY)")
	databaseURL := fs.String("database-url", os.Getenv("DATABASE_URL"),
		"PostgreSQL `url` of the RetryContext journal; migrated at start-up. Empty: the journal is off (env DATABASE_URL)")
	journalTimeout := fs.Duration("journal-timeout", server.DefaultJournalTimeout,
		"how long NextDelay waits for its journal commit before answering journaled=false")
	batchWindow := fs.Duration("journal-batch-window", journal.DefaultBatchWindow,
		"how long the journal writer waits for concurrent records to share a commit; 0 commits what is queued at once")
	writers := fs.Int("journal-writers", journal.DefaultWriters, "concurrent journal writers (each commits its own batches)")
	copyMinRows := fs.Int("journal-copy-min-rows", journal.DefaultCopyMinRows,
		"write a batch of at least this many attempts with COPY instead of one INSERT; 0: never")
	messageChars := fs.Int("journal-message-chars", journal.DefaultMessageChars,
		fmt.Sprintf("characters of each attempt's error message the journal keeps (%d..%d); longer ones are cut", journal.MinMessageChars, journal.MaxMessageChars))
	abandonAfter := fs.Duration("abandon-after", journal.DefaultAbandonAfter,
		"mark a context abandoned after this long in progress without a new attempt (its agent is gone); 0: never")
	metricsListen := fs.String("metrics-listen", os.Getenv("POLICYD_METRICS_LISTEN"),
		"`address` (host:port) to serve Prometheus /metrics, /healthz and /readyz on over HTTP; empty: off (env POLICYD_METRICS_LISTEN)")
	profiling := fs.Bool("pprof", false,
		"also serve Go's profiles under /debug/pprof/ on the --metrics-listen address (for an operator profiling a live daemon)")
	fleetMode := fs.String("fleet", envOr("POLICYD_FLEET", "on"),
		"fleet memory: on (share each failure with every agent on the same provider, model and key: holds, stops, breakers, retry budgets) or off (env POLICYD_FLEET)")
	fleetStore := fs.String("fleet-store", os.Getenv("POLICYD_FLEET_STORE"),
		"where replicas share fleet memory: postgres (the journal's database; the default with --database-url) or memory (this replica alone; the default without) (env POLICYD_FLEET_STORE)")
	replicaID := fs.String("replica-id", os.Getenv("POLICYD_REPLICA_ID"),
		"this replica's `id` in a fleet shared through PostgreSQL; default host name, process id and a random suffix (env POLICYD_REPLICA_ID)")
	sf := defineSecurityFlags(fs)
	if err := parseFlags(fs, args, stdout); err != nil {
		return nil, err
	}
	cfg := &serveConfig{listen: *listen, metricsListen: *metricsListen, profiling: *profiling, policyFile: *policyFile,
		databaseURL: *databaseURL, journalTimeout: *journalTimeout, abandonAfter: *abandonAfter, sf: sf}
	var err error
	if cfg.security, err = sf.security(); err != nil {
		return nil, err
	}
	if cfg.admins, err = sf.admins(cfg.security); err != nil {
		return nil, err
	}
	if cfg.logger, err = newLogger(stderr, *level, *format); err != nil {
		return nil, err
	}
	if cfg.policy, err = policy.Load(*policyFile, os.Getenv); err != nil {
		return nil, usageErrorf("serve: %v", err)
	}
	if cfg.webhooks, err = webhookReceivers(cfg.policy.Webhooks, os.Getenv); err != nil {
		return nil, usageErrorf("serve: %v", err)
	}
	if cfg.telemetry, err = telemetry.ConfigFromEnv(os.Getenv); err != nil {
		return nil, usageErrorf("serve: %v", err)
	}
	if cfg.metricsListen != "" {
		if _, _, err := net.SplitHostPort(cfg.metricsListen); err != nil {
			return nil, usageErrorf("serve: --metrics-listen (or POLICYD_METRICS_LISTEN): want host:port, got %q", cfg.metricsListen)
		}
	} else if cfg.profiling {
		return nil, usageErrorf("serve: --pprof needs --metrics-listen: the profiles are served on that address")
	}
	if cfg.databaseURL != "" {
		if *batchWindow < 0 || *writers < 1 {
			return nil, usageErrorf("serve: --journal-batch-window must be ≥ 0 and --journal-writers ≥ 1")
		}
		if *abandonAfter < 0 {
			return nil, usageErrorf("serve: --abandon-after must be ≥ 0 (0: never), got %v", *abandonAfter)
		}
		if *copyMinRows < 0 {
			return nil, usageErrorf("serve: --journal-copy-min-rows must be ≥ 0, got %d", *copyMinRows)
		}
		if *messageChars < journal.MinMessageChars || *messageChars > journal.MaxMessageChars {
			return nil, usageErrorf("serve: --journal-message-chars must be %d..%d, got %d", journal.MinMessageChars, journal.MaxMessageChars, *messageChars)
		}
		cfg.journalOpts = []journal.Option{journal.WithBatchWindow(*batchWindow), journal.WithWriters(*writers),
			journal.WithMessageChars(*messageChars), journal.WithCopyMinRows(*copyMinRows)}
	}
	switch *fleetMode {
	case "on", "off":
		cfg.fleetOn = *fleetMode == "on"
		if !cfg.fleetOn && len(cfg.webhooks) > 0 {
			cfg.logger.Warn("webhooks send nothing with --fleet off: they push fleet transitions")
		}
	default:
		return nil, usageErrorf("serve: --fleet (or POLICYD_FLEET): want on or off, got %q", *fleetMode)
	}
	switch cfg.fleetStore = *fleetStore; cfg.fleetStore {
	case "":
		cfg.fleetStore = "memory"
		if cfg.databaseURL != "" {
			cfg.fleetStore = "postgres"
		}
	case "memory":
	case "postgres":
		if cfg.databaseURL == "" {
			return nil, usageErrorf("serve: --fleet-store postgres needs --database-url (or DATABASE_URL): the replicas share the journal's database")
		}
	default:
		return nil, usageErrorf("serve: --fleet-store (or POLICYD_FLEET_STORE): want memory or postgres, got %q", cfg.fleetStore)
	}
	switch cfg.replicaID = *replicaID; {
	case cfg.replicaID == "":
		cfg.replicaID = defaultReplicaID()
	case len(cfg.replicaID) > 128:
		return nil, usageErrorf("serve: --replica-id (or POLICYD_REPLICA_ID): at most 128 bytes, got %d", len(cfg.replicaID))
	}
	return cfg, nil
}

// runDaemon is the daemon's composition root: it opens the journal, the fleet
// and its exchange, builds the three services, starts every background part
// through one lifecycle, serves until ctx ends and then stops gracefully:
// the gRPC server first, then the background parts in the reverse order of
// their start, the metrics endpoint last.
func runDaemon(ctx context.Context, cfg *serveConfig) error {
	logger := cfg.logger
	var (
		psOpts []server.Option
		gOpts  []server.GRPCOption
		ms     *metrics.Metrics
	)
	jOpts := cfg.journalOpts
	if cfg.metricsListen != "" || cfg.telemetry.Metrics { // served on /metrics, exported over OTLP, or both
		ms = metrics.New()
		psOpts = append(psOpts, server.WithDecisionObserver(ms))
		jOpts = append(jOpts, journal.WithObserver(ms))
		gOpts = append(gOpts, server.WithMonitoring(ms.UnaryServerInterceptor(), ms.StreamServerInterceptor()))
	}
	lc := newLifecycle()
	defer lc.stop() // on an early return; a graceful stop has stopped it already
	// Registered first, so stopped last: flushing every call's span.
	telOpts, err := startTelemetry(ctx, cfg, lc, ms)
	if err != nil {
		return err
	}
	gOpts = append(gOpts, telOpts...)

	var store *journal.Store
	if cfg.databaseURL != "" {
		var err error
		if store, err = openJournal(ctx, cfg.databaseURL, logger, jOpts...); err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		lc.onStop(func() { closeJournal(store, logger) })
		psOpts = append(psOpts, server.WithJournal(store, cfg.journalTimeout))
		if ms != nil {
			ms.ObserveJournal(store)
		}
	} else {
		logger.Info("journal off: pass --database-url or DATABASE_URL to record RetryContexts")
	}

	var (
		f      *fleet.Fleet
		syncer *fleet.Syncer
	)
	if cfg.fleetOn {
		var err error
		if f, syncer, err = openFleet(ctx, cfg, store, ms, lc); err != nil {
			return err
		}
		psOpts = append(psOpts, server.WithFleet(f))
	}

	ps := server.NewPolicyServer(cfg.policy, psOpts...)
	rl, err := newReloader(cfg.policyFile, os.Getenv, warnWebhookChanges(cfg, ps.SetPolicy), logger)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	lc.onStop(rl.close)
	if *cfg.sf.tokensFile != "" {
		rl.onSIGHUP(func() { reloadTokens(*cfg.sf.tokensFile, cfg.security.Auth, logger) })
	}
	if cfg.sf.tls != nil {
		rl.onSIGHUP(func() { reloadTLS(cfg.sf.tls, logger) })
	}

	lis, err := new(net.ListenConfig).Listen(ctx, "tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	gOpts = append(gOpts, server.WithServerOptions(cfg.security.ServerOptions(logger)...))
	fsrv := server.NewFleetServer(f, ps, server.WithIncidentJournal(store))
	fsrv.SetAdmins(cfg.admins)
	jsrv := server.NewJournalServer(store, ps)
	gs, hs := server.NewGRPCServer(ps, jsrv, fsrv, logger, gOpts...)

	// The background parts, stopped in the reverse order.
	lc.run(rl.run)
	if f != nil {
		lc.run(f.Run) // the fleet's one clock: breakers' timers, streams' ticks, the syncer's rounds
	}
	if syncer != nil {
		lc.run(syncer.Run)
		server.SetFleetSyncHealth(hs, true) // until a round says otherwise: the exchange answered at start
		lc.run(func(ctx context.Context) { server.WatchFleetSync(ctx, hs, syncer, logger) })
	}
	lc.run(func(ctx context.Context) { server.WatchJournal(ctx, hs, store) })
	if store != nil && cfg.abandonAfter > 0 {
		lc.run(func(ctx context.Context) { store.RunAbandoner(ctx, cfg.abandonAfter) })
	}

	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	var metricsSrv *metrics.HTTPServer
	metricsServed := make(chan error, 1)
	if cfg.metricsListen != "" {
		if metricsSrv, err = ms.Listen(ctx, cfg.metricsListen, hs, logger, cfg.profiling); err != nil {
			gs.Stop()
			return fmt.Errorf("serve: %w", err)
		}
		page := statusPage(cfg, fsrv, jsrv)
		metricsSrv.Handle("GET /{$}", page)
		metricsSrv.Handle("GET /status", page)
		go func() { metricsServed <- metricsSrv.Serve() }()
		logger.Info("serving metrics", "addr", metricsSrv.Addr().String())
	}
	logger.Info("serving", "addr", lis.Addr().String(), "policy", cfg.policy.Source, "profiles", len(cfg.policy.Profiles),
		"journal", store != nil, "tls", cfg.security.TLS != nil, "auth", cfg.sf.authMode())
	if cfg.security.Auth == nil && !isLoopback(lis.Addr()) {
		logger.Warn("serving beyond loopback without authentication: pass --auth-tokens or --tls-client-ca", "addr", lis.Addr().String())
	}

	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case err := <-metricsServed:
		gs.Stop()
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	logger.Info("shutting down", "timeout", shutdownTimeout)
	hs.Shutdown() // NOT_SERVING, so load balancers stop sending first
	if !finishesWithin(shutdownTimeout, gs.GracefulStop) {
		logger.Warn("graceful stop timed out, closing connections")
		gs.Stop() // GracefulStop then returns too
	}
	<-served // nil after a stop
	lc.stop()
	if metricsSrv != nil { // last: /readyz says NOT_SERVING until the end
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = metricsSrv.Shutdown(sctx)
		cancel()
	}
	logger.Info("stopped")
	return nil
}

// statusPage is the read-only status page served on the metrics address:
// it reads through the fleet and journal services, behind the daemon's
// bearer tokens when it authenticates.
func statusPage(cfg *serveConfig, fsrv *server.FleetServer, jsrv *server.JournalServer) *statuspage.Page {
	opts := []statuspage.Option{statuspage.WithLogger(cfg.logger)}
	if cfg.security.Auth != nil {
		opts = append(opts, statuspage.WithAuth(cfg.security.Auth))
	}
	return statuspage.New(fsrv, jsrv, opts...)
}

// openFleet makes the fleet: its events' sink (the log, the journal's
// fleet_events, the metrics) and, for a fleet shared through PostgreSQL,
// its exchange and Syncer (nil otherwise). What it opens, lc closes.
func openFleet(ctx context.Context, cfg *serveConfig, store *journal.Store, ms *metrics.Metrics, lc *lifecycle) (*fleet.Fleet, *fleet.Syncer, error) {
	var rec fleetevents.Recorder
	if store != nil {
		events := store.FleetEventRecorder()
		lc.onStop(events.Close) // before the store it writes to
		rec = events
	}
	var counter fleetevents.Counter
	if ms != nil {
		counter = ms
	}
	shared := cfg.fleetStore == "postgres"
	sinkReplica := ""
	if shared {
		sinkReplica = cfg.replicaID // fleet_events.replica: which replica journaled each transition
	}
	sink := fleetevents.Sink(cfg.logger, rec, counter, sinkReplica)
	if len(cfg.webhooks) > 0 {
		sink = withWebhooks(sink, cfg, ms, lc)
	}
	opts := []fleet.Option{fleet.WithSink(sink)}
	if !shared {
		f := fleet.New(cfg.policy.Fleet, opts...)
		if ms != nil {
			ms.ObserveFleet(f)
		}
		return f, nil, nil
	}
	exchange, err := pgexchange.Open(ctx, cfg.databaseURL, pgexchange.WithLogger(cfg.logger))
	if err != nil {
		return nil, nil, fmt.Errorf("serve: fleet store: %w", err)
	}
	lc.onStop(exchange.Close)
	f := fleet.New(cfg.policy.Fleet, append(opts, fleet.WithReplica(cfg.replicaID))...)
	syncer := fleet.NewSyncer(f, exchange)
	if ms != nil {
		ms.ObserveFleet(f)
		ms.ObserveFleetSync(syncer)
	}
	cfg.logger.Info("fleet shared through PostgreSQL", "replica", cfg.replicaID)
	return f, syncer, nil
}

// closeJournal commits what the journal's writers still hold, giving up
// after journalCloseTimeout.
func closeJournal(store *journal.Store, logger *slog.Logger) {
	if !finishesWithin(journalCloseTimeout, store.Close) {
		logger.Warn("journal flush timed out; exiting without it", "timeout", journalCloseTimeout)
	}
}

// finishesWithin runs fn and reports whether it returned within d; when it did
// not, fn goes on running in the background.
func finishesWithin(d time.Duration, fn func()) bool {
	done := make(chan struct{})
	go func() {
		fn()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// newLogger returns a slog.Logger writing level and above to w as format.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lvl slog.Level
	switch level {
	case "debug":
		lvl = slog.LevelDebug
	case "info":
		lvl = slog.LevelInfo
	case "warn":
		lvl = slog.LevelWarn
	case "error":
		lvl = slog.LevelError
	default:
		return nil, usageErrorf("serve: --log-level (or POLICYD_LOG_LEVEL): want debug, info, warn or error, got %q", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, usageErrorf("serve: --log-format: want text or json, got %q", format)
	}
}

// envOr returns the environment variable key, or def when it is unset or
// empty; a flag given on the command line overrides either.
func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// defaultReplicaID names this process among a shared fleet's replicas:
// host name and process id, for an operator to find it, and a random
// suffix, so that a restarted process is a new replica (its old counts age
// out) even where process ids repeat, as in containers.
func defaultReplicaID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "policyd"
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%x", host, os.Getpid(), b)
}
