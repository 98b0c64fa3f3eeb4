package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/auth/authtest"
	"github.com/policyd/policyd/internal/journal/journaltest"
)

// screenshotDirEnv names a directory for the browser test's screenshots
// (default: the test's temporary directory, removed after it).
const screenshotDirEnv = "POLICYD_SCREENSHOT_DIR"

// chromium is the path of a headless Chromium, installed by
// scripts/chromium.sh where none is found.
func chromium(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(filepath.Join("..", "..", "scripts", "chromium.sh")).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("scripts/chromium.sh: %v\n%s", err, stderr)
	}
	return strings.TrimSpace(string(out))
}

// browser runs headless Chromium with a profile of its own.
type browser struct {
	t       *testing.T
	bin     string
	profile string
	shots   string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	shots := os.Getenv(screenshotDirEnv)
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	return &browser{t: t, bin: chromium(t), profile: t.TempDir(), shots: shots}
}

func (b *browser) run(args ...string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.t.Context(), 90*time.Second)
	defer cancel()
	// --no-sandbox: tests run as root here, where Chromium's sandbox will
	// not start; the page is our own, on loopback.
	cmd := exec.CommandContext(ctx, b.bin, append([]string{"--headless", "--no-sandbox", "--disable-gpu",
		"--no-first-run", "--user-data-dir=" + b.profile, "--hide-scrollbars", "--window-size=1200,1500"}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		b.t.Fatalf("chromium %v: %v", args, err)
	}
	return string(out)
}

// text is what a person reads on the page at url: Chromium's DOM after
// loading it, with the markup stripped.
func (b *browser) text(url string) string {
	b.t.Helper()
	dom := b.run("--dump-dom", url)
	var sb strings.Builder
	inTag := false
	for _, r := range dom {
		switch {
		case r == '<':
			inTag = true
			sb.WriteRune(' ')
		case r == '>':
			inTag = false
		case !inTag:
			sb.WriteRune(r)
		}
	}
	return strings.Join(strings.Fields(sb.String()), " ")
}

// screenshot keeps the page at url as name in the screenshot directory.
func (b *browser) screenshot(url, name string) string {
	b.t.Helper()
	path := filepath.Join(b.shots, name)
	b.run("--screenshot="+path, url)
	if st, err := os.Stat(path); err != nil || st.Size() == 0 {
		b.t.Fatalf("no screenshot at %s: %v", path, err)
	}
	return path
}

// untilText loads url until its text holds every one of want.
func (b *browser) untilText(url string, limit time.Duration, want ...string) string {
	b.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		text := b.text(url)
		missing := ""
		for _, w := range want {
			if !strings.Contains(text, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return text
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("the page at %s never showed %q; it reads:\n%s", url, missing, text)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TestStatusPageInABrowserE2E: a real policyd with a real journal goes
// through an outage (three agents' 503s open a breaker, then the
// provider's successes close it), and headless Chromium loads its status
// page during it and after: the bucket in trouble, since when, what policyd
// is doing, and that it recovered. The CLI reads the same incident.
func TestStatusPageInABrowserE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the status page's browser test in short mode: it runs headless Chromium against a real policyd and PostgreSQL")
	}
	t.Parallel()
	dbURL := journaltest.DatabaseURL(t)
	b := newBrowser(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	d := startDaemon(t, ctx, "--database-url", dbURL, "--metrics-listen", "127.0.0.1:0")
	page := "http://" + d.metricsAddr(t) + "/"

	before := b.text(page)
	if !strings.Contains(before, "policyd status") || !strings.Contains(before, "No bucket has state") {
		t.Fatalf("a quiet daemon's page reads:\n%s", before)
	}

	// The outage: three agents, each its own process (connection), their
	// calls journaled; agent-0's process streams its gate's counts.
	jc := policydv1.NewJournalServiceClient(d.conn(t))
	fc := policydv1.NewFleetServiceClient(d.conn(t))
	stream, err := fc.Coordinate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&policydv1.CoordinateRequest{ClientId: "agent-0"}); err != nil {
		t.Fatal(err)
	}
	go func() { // the assignments, unread otherwise
		for {
			if _, err := stream.Recv(); err != nil {
				return
			}
		}
	}()
	target := &policydv1.BucketTarget{Provider: "openai", Model: "gpt-4o"}
	agents := map[string]policydv1.PolicyServiceClient{}
	var contexts []string
	started := time.Now().UTC()
	overloaded := &policydv1.Failure{Provider: "openai", Model: "gpt-4o", HttpStatus: 503,
		Body: `{"error":{"message":"The server is overloaded or not ready yet.","type":"server_error"}}`}
	for i := range 24 {
		agent := fmt.Sprintf("agent-%d", i%3)
		if agents[agent] == nil {
			agents[agent] = policydv1.NewPolicyServiceClient(dialCreds(t, d.addr, insecure.NewCredentials()))
		}
		bc, err := jc.BeginContext(ctx, &policydv1.BeginContextRequest{Agent: agent, Provider: "openai", Model: "gpt-4o", Operation: "chat"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := agents[agent].NextDelay(ctx, &policydv1.NextDelayRequest{ContextId: bc.GetContext().GetContextId(), Attempt: 1,
			ClientId: agent, Failure: overloaded}); err != nil {
			t.Fatal(err)
		}
		contexts = append(contexts, bc.GetContext().GetContextId())
	}
	// The gate parks six calls and gives up on four, two of them sent to
	// the fallback; one agent's run ends on a revoked key.
	if err := stream.Send(&policydv1.CoordinateRequest{Usage: []*policydv1.BucketUsage{{Target: target,
		Elapsed: durationpb.New(time.Second), Shed: 4, FellBack: 2, Parked: 6, ParkedNew: 6}}}); err != nil {
		t.Fatal(err)
	}
	failed := contexts[len(contexts)-1]
	contexts = contexts[:len(contexts)-1]
	if _, err := agents["agent-2"].NextDelay(ctx, &policydv1.NextDelayRequest{ContextId: failed, Attempt: 2, ClientId: "agent-2",
		Failure: &policydv1.Failure{Provider: "openai", Model: "gpt-4o", HttpStatus: 401,
			Body: `{"error":{"message":"Incorrect API key provided","code":"invalid_api_key"}}`}}); err != nil {
		t.Fatal(err)
	}
	if _, err := jc.FinishContext(ctx, &policydv1.FinishContextRequest{ContextId: failed, Outcome: policydv1.Outcome_OUTCOME_FAILED}); err != nil {
		t.Fatal(err)
	}

	during := b.untilText(page, 10*time.Second, "in trouble since", "policyd now: breaker open",
		"first attempts parked: 6", "first attempts shed: 4", "of them fell back: 2")
	for _, want := range []string{
		"availability:openai/gpt-4o",
		"breaker open", // the bucket's state
		"first failure " + started.Format("2006-01-02 15:04"),
		"OVERLOADED",
		"from 3 clients",
		"AUTH_INVALID",            // the failed run's error report
		"Fix the API credentials", // and what a person must do
	} {
		if !strings.Contains(during, want) {
			t.Errorf("during the outage the page does not say %q; it reads:\n%s", want, during)
		}
	}
	b.screenshot(page, "status-outage.png")

	// The provider is back: once the breaker half-opens, the stream reports
	// two successes, which close it; the parked calls get through.
	closed := false
	for deadline := time.Now().Add(20 * time.Second); !closed && time.Now().Before(deadline); {
		bucket, err := fc.GetBucket(ctx, &policydv1.GetBucketRequest{Bucket: "availability:openai/gpt-4o"})
		if err != nil {
			t.Fatal(err)
		}
		switch bucket.GetBucket().GetState().GetBreaker() {
		case policydv1.BreakerState_BREAKER_STATE_HALF_OPEN:
			if err := stream.Send(&policydv1.CoordinateRequest{Usage: []*policydv1.BucketUsage{{Target: target,
				Elapsed: durationpb.New(time.Second), Admitted: 2, Succeeded: 2, Parked: 4}}}); err != nil {
				t.Fatal(err)
			}
		case policydv1.BreakerState_BREAKER_STATE_CLOSED:
			closed = true
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !closed {
		t.Fatal("the breaker never closed")
	}
	_ = stream.CloseSend()
	for _, id := range contexts {
		if _, err := jc.FinishContext(ctx, &policydv1.FinishContextRequest{ContextId: id, Outcome: policydv1.Outcome_OUTCOME_RESOLVED}); err != nil {
			t.Fatal(err)
		}
	}

	after := b.untilText(page, 10*time.Second, "recovered after", "breaker close")
	for _, want := range []string{"successes reported while half-open", "calls resolved"} {
		if !strings.Contains(after, want) {
			t.Errorf("after the recovery the page does not say %q; it reads:\n%s", want, after)
		}
	}
	if strings.Contains(after, "in trouble since") || strings.Contains(after, "policyd now:") {
		t.Errorf("after the recovery the page still says the bucket is in trouble:\n%s", after)
	}
	shot := b.screenshot(page, "status-recovered.png")
	t.Logf("screenshots in %s (%s: the page after the recovery)", b.shots, filepath.Base(shot))

	// The CLI reads the same incident.
	bin := policydBinary(t)
	list := runCommand(t, bin, "", []string{"incidents", "--addr", d.addr}, 0, "availability:openai/gpt-4o", "")
	var incidents struct {
		Incidents []struct {
			ID       string `json:"id"`
			Breaker  string `json:"breaker"`
			Parked   string `json:"firstAttemptsParked"`
			Shed     string `json:"firstAttemptsShed"`
			FellBack string `json:"firstAttemptsFellBack"`
		} `json:"incidents"`
	}
	if err := json.Unmarshal(list, &incidents); err != nil || len(incidents.Incidents) != 1 ||
		incidents.Incidents[0].Breaker != "BREAKER_STATE_CLOSED" || incidents.Incidents[0].Parked != "6" ||
		incidents.Incidents[0].Shed != "4" || incidents.Incidents[0].FellBack != "2" {
		t.Fatalf("policyd incidents: %v\n%s", err, list)
	}
	if _, err := strconv.ParseInt(incidents.Incidents[0].ID, 10, 64); err != nil {
		t.Fatalf("incident id %q: %v", incidents.Incidents[0].ID, err)
	}
	runCommand(t, bin, "", []string{"incidents", "--addr", d.addr, incidents.Incidents[0].ID}, 0, `"event": "breaker_half_open"`, "")
	runCommand(t, bin, "", []string{"incidents", "--addr", d.addr, "--open"}, 0, "{}", "")
}

// TestStatusPageAuthE2E: with --auth-tokens the page needs a token, and a
// browser is asked for one (basic authentication).
func TestStatusPageAuthE2E(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	tokens := authtest.TokensFile(t, [2]string{"acme", e2eTokenAcme})
	d := startDaemon(t, ctx, "--auth-tokens", tokens, "--metrics-listen", "127.0.0.1:0")
	page := "http://" + d.metricsAddr(t) + "/status"
	for _, tt := range []struct {
		name     string
		user     string
		token    string
		wantCode int
	}{
		{"no credentials", "", "", http.StatusUnauthorized},
		{"a wrong token", "ops", "wrong-token-000000000000", http.StatusUnauthorized},
		{"acme's token", "ops", e2eTokenAcme, http.StatusOK},
	} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, page, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tt.token != "" {
			req.SetBasicAuth(tt.user, tt.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != tt.wantCode {
			t.Errorf("%s: %d, want %d", tt.name, resp.StatusCode, tt.wantCode)
		}
		if tt.wantCode == http.StatusUnauthorized && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic") {
			t.Errorf("%s: WWW-Authenticate %q, want a basic-authentication challenge", tt.name, resp.Header.Get("WWW-Authenticate"))
		}
	}
	if code, _ := httpGet(t, "http://"+d.metricsAddr(t)+"/metrics"); code != http.StatusOK {
		t.Errorf("/metrics: %d, want 200 (it stays open, for Prometheus)", code)
	}
}
