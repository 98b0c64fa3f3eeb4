package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/journal/journaltest"
)

// metricsAddr is the address of d's "serving metrics" record.
func (d *daemon) metricsAddr(t *testing.T) string {
	t.Helper()
	for line := range strings.Lines(d.logs.String()) {
		var rec struct{ Msg, Addr string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "serving metrics" {
			return rec.Addr
		}
	}
	t.Fatalf("no \"serving metrics\" record:\n%s", d.logs.String())
	return ""
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// The binary with --metrics-listen and a journal: a journaled NextDelay
// moves the decision, gRPC and journal metrics on /metrics, the request id
// comes back, readiness is served over HTTP, and SIGTERM exits 0.
func TestServeMetricsE2E(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	d := startDaemon(t, ctx, "--database-url", journaltest.DatabaseURL(t), "--metrics-listen", "127.0.0.1:0")
	base := "http://" + d.metricsAddr(t)

	var header metadata.MD
	resp, err := d.dial(t).NextDelay(metadata.AppendToOutgoingContext(ctx, "x-request-id", "e2e-req-1"),
		&policydv1.NextDelayRequest{ContextId: uuid.NewString(), Attempt: 1, Failure: &policydv1.Failure{HttpStatus: 429}},
		grpc.Header(&header))
	if err != nil || !resp.GetDecision().GetJournaled() {
		t.Fatalf("NextDelay: journaled=%v, err %v", resp.GetDecision().GetJournaled(), err)
	}
	if got := header.Get("x-request-id"); len(got) != 1 || got[0] != "e2e-req-1" {
		t.Errorf("x-request-id response header = %q, want [e2e-req-1]", got)
	}

	code, body := httpGet(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", code)
	}
	for _, want := range []string{
		`policyd_decisions_total{action="RETRY",failure_type="RATE_LIMIT",profile="default"} 1`,
		`policyd_nextdelay_journal_total{result="journaled"} 1`,
		`grpc_server_handled_total{grpc_code="OK",grpc_method="NextDelay",grpc_service="policyd.v1.PolicyService",grpc_type="unary"} 1`,
		`policyd_journal_batch_size_count 1`,
		`policyd_journal_up 1`,
		`policyd_journal_queue_depth 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for path, want := range map[string]int{
		"/healthz": http.StatusOK, "/readyz": http.StatusOK, "/readyz?service=policyd.v1.JournalService": http.StatusOK,
	} {
		if code, body := httpGet(t, base+path); code != want {
			t.Errorf("GET %s = %d %q, want %d", path, code, body, want)
		}
	}

	d.terminate(t, 15*time.Second)
	if !d.hasRecord(map[string]string{"msg": "stopped"}) {
		t.Errorf("no \"stopped\" record after SIGTERM:\n%s", d.logs.String())
	}
}

// A bad --metrics-listen is a usage error (exit 2) naming the flag; a port
// that is taken fails the start (exit 1).
func TestServeMetricsListenFlagE2E(t *testing.T) {
	t.Parallel()
	bin := policydBinary(t)
	runCommand(t, bin, "", []string{"serve", "--listen", "127.0.0.1:0", "--metrics-listen", "nope"}, 2, "", "--metrics-listen")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := startDaemon(t, ctx, "--metrics-listen", "127.0.0.1:0")
	runCommand(t, bin, "", []string{"serve", "--listen", "127.0.0.1:0", "--metrics-listen", d.metricsAddr(t)}, 1, "", "metrics")
}
