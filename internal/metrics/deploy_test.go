package metrics_test

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	dto "github.com/prometheus/client_model/go"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/fleet/pgexchange"
	"github.com/policyd/policyd/internal/fleetevents"
	"github.com/policyd/policyd/internal/journal"
	"github.com/policyd/policyd/internal/journal/journaltest"
	"github.com/policyd/policyd/internal/metrics"
	"github.com/policyd/policyd/internal/policy"
	"github.com/policyd/policyd/internal/server"
	"github.com/policyd/policyd/internal/webhook"
)

// The files under deploy/ that name metrics.
var (
	alertRules = filepath.Join("..", "..", "deploy", "prometheus", "policyd-alerts.yml")
	dashboard  = filepath.Join("..", "..", "deploy", "grafana", "policyd-dashboard.json")
)

// exportedNames wires a daemon as serve does with every part on (a
// journal, a fleet shared through PostgreSQL, metrics), exercises it (a
// journaled decision, a fleet stop, a Coordinate report, a webhook
// event), and returns the name of every series its registry then gathers,
// histograms' and summaries' _bucket, _sum and _count included.
func exportedNames(t *testing.T) map[string]bool {
	t.Helper()
	ctx := testContext(t)
	url := journaltest.DatabaseURL(t)
	ms := metrics.New()
	store, err := journal.Open(ctx, url, journal.WithLogger(quiet), journal.WithObserver(ms))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	ms.ObserveJournal(store)
	ex, err := pgexchange.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ex.Close)
	f := fleet.New(fleet.Defaults(), fleet.WithReplica("r1"), fleet.WithSink(fleetevents.Sink(quiet, nil, ms, "r1")))
	syncer := fleet.NewSyncer(f, ex)
	ms.ObserveFleet(f)
	ms.ObserveFleetSync(syncer)

	ps := server.NewPolicyServer(policy.Builtin(), server.WithJournal(store, 5*time.Second), server.WithDecisionObserver(ms), server.WithFleet(f))
	gs, _ := server.NewGRPCServer(ps, server.NewJournalServer(store, ps), server.NewFleetServer(f, ps), quiet,
		server.WithMonitoring(ms.UnaryServerInterceptor(), ms.StreamServerInterceptor()))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis) //nolint:errcheck // Serve returns nil after Stop.
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	pc := policydv1.NewPolicyServiceClient(conn)

	if _, err := pc.NextDelay(ctx, &policydv1.NextDelayRequest{ContextId: uuid.NewString(), Attempt: 1,
		Failure: &policydv1.Failure{Provider: "openai", Model: "gpt-4o", HttpStatus: 503}}); err != nil {
		t.Fatal(err)
	}
	if _, err := pc.NextDelay(ctx, &policydv1.NextDelayRequest{ClientId: "a", Attempt: 1, Failure: &policydv1.Failure{
		Provider: "openai", Model: "gpt-4o", KeyId: "prod", HttpStatus: 401,
		Body: `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`}}); err != nil {
		t.Fatal(err)
	}
	f.StreamOpened()
	target := fleet.Target{Provider: "openai", Model: "gpt-4o", KeyID: "prod"}
	f.Report(fleet.Usage{Target: target, ClientID: "a", Admitted: 3, Shed: 1, Succeeded: 2})
	f.CountAssignments(target, 1)
	ms.WebhookEvent(webhook.Delivered)
	if err := syncer.Step(ctx, true); err != nil {
		t.Fatal(err)
	}

	mfs, err := ms.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		n := mf.GetName()
		names[n] = true
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM:
			names[n+"_bucket"], names[n+"_sum"], names[n+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			names[n+"_sum"], names[n+"_count"] = true, true
		}
	}
	return names
}

var identRE = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)

// promqlNames returns the metric names an expression selects: what is
// left once strings, label matchers, ranges and grouping labels are taken
// out, less functions, keywords and numbers.
func promqlNames(expr string) []string {
	for _, re := range []*regexp.Regexp{
		regexp.MustCompile(`"(?:[^"\\]|\\.)*"`),
		regexp.MustCompile(`\{[^}]*\}`),
		regexp.MustCompile(`\[[^\]]*\]`),
		regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`),
	} {
		expr = re.ReplaceAllString(expr, " ")
	}
	keywords := map[string]bool{"and": true, "or": true, "unless": true, "offset": true, "bool": true, "inf": true, "nan": true}
	var out []string
	for _, loc := range identRE.FindAllStringIndex(expr, -1) {
		name := expr[loc[0]:loc[1]]
		if loc[0] > 0 && strings.ContainsRune("$0123456789.", rune(expr[loc[0]-1])) {
			continue // a variable, or a number's unit (5m)
		}
		if strings.HasPrefix(strings.TrimLeft(expr[loc[1]:], " \t\n"), "(") || keywords[strings.ToLower(name)] {
			continue // a function, an aggregation or a keyword
		}
		out = append(out, name)
	}
	return out
}

func TestPromqlNames(t *testing.T) {
	t.Parallel()
	got := promqlNames(`histogram_quantile(0.99, sum by (le, grpc_method) (rate(grpc_server_handling_seconds_bucket{job=~"$job", a="x}"}[$__rate_interval])))
		> 3 * sum without (state) (policyd_fleet_breakers offset 5m) and on(instance) policyd_journal_up == bool 0`)
	want := []string{"grpc_server_handling_seconds_bucket", "policyd_fleet_breakers", "policyd_journal_up"}
	if !slices.Equal(got, want) {
		t.Errorf("promqlNames = %v, want %v", got, want)
	}
}

// ruleExprs reads the alert rules' expressions, by alert name.
func ruleExprs(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(alertRules)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			Rules []struct{ Alert, Record, Expr string }
		}
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v", alertRules, err)
	}
	out := map[string]string{}
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			out[r.Alert+r.Record] = r.Expr
		}
	}
	return out
}

// dashboardExprs reads every PromQL expression of the dashboard: panel
// targets, annotations, and the metric of each label_values variable.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(dashboard)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v", dashboard, err)
	}
	labelValues := regexp.MustCompile(`^label_values\((.*),\s*\w+\)$`)
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, c := range v {
				if s, ok := c.(string); ok && (k == "expr" || k == "definition") {
					if m := labelValues.FindStringSubmatch(s); m != nil {
						s = m[1]
					}
					out = append(out, s)
				}
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(doc)
	return out
}

// TestDeployNamesExportedMetrics: every metric the alert rules and the
// Grafana dashboard under deploy/ name is one the daemon exports, so that
// a renamed metric cannot leave a dashboard blank or an alert silent.
func TestDeployNamesExportedMetrics(t *testing.T) {
	t.Parallel()
	exported := exportedNames(t)
	check := func(where, expr string) int {
		names := promqlNames(expr)
		for _, n := range names {
			if !exported[n] {
				t.Errorf("%s names %s, which the daemon does not export", where, n)
			}
		}
		return len(names)
	}
	rules := ruleExprs(t)
	for _, alert := range []string{"PolicydBreakerOpenTooLong", "PolicydJournalDown", "PolicydKeyStopped", "PolicydRetryRateClimbing", "PolicydJournalDroppedShareRising"} {
		if rules[alert] == "" {
			t.Errorf("%s has no alert %s", alertRules, alert)
		}
	}
	for alert, expr := range rules {
		if check(alertRules+": "+alert, expr) == 0 {
			t.Errorf("%s: %s names no metric: %q", alertRules, alert, expr)
		}
	}
	exprs := dashboardExprs(t)
	if len(exprs) < 20 {
		t.Fatalf("%s: only %d expressions found", dashboard, len(exprs))
	}
	used := map[string]bool{}
	for _, e := range exprs {
		if check(dashboard, e) == 0 {
			t.Errorf("%s: an expression names no metric: %q", dashboard, e)
		}
		for _, n := range promqlNames(e) {
			used[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")] = true
		}
	}
	// And the dashboard shows every metric of policyd's own.
	var missing []string
	for n := range exported {
		if strings.HasPrefix(n, "policyd_") && !used[n] && !strings.HasSuffix(n, "_bucket") && !strings.HasSuffix(n, "_sum") && !strings.HasSuffix(n, "_count") {
			missing = append(missing, n)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("%s shows none of %v", dashboard, missing)
	}
}
