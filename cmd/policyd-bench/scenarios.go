package main

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/loadgen"
)

// providerBody is a typical 1 KiB provider error body: a Gemini 429 with
// its quota details, as the classifier's own benchmark uses.
var providerBody = func() string {
	b := `{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota). Quota exceeded for metric: ` +
		`generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 15","status":"RESOURCE_EXHAUSTED",` +
		`"details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":` +
		`"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":"GenerateRequestsPerMinutePerProjectPerModel-FreeTier",` +
		`"quotaDimensions":{"location":"global","model":"gemini-2.0-flash"},"quotaValue":"15"}]},` +
		`{"@type":"type.googleapis.com/google.rpc.Help","links":[{"description":"Learn more about Gemini API quotas",` +
		`"url":"https://ai.google.dev/gemini-api/docs/rate-limits"}]},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"7s"}]}`
	return b + strings.Repeat(" ", max(0, 1024-len(b)))
}()

func providerFailure() *policydv1.Failure {
	return &policydv1.Failure{
		Provider: "google", Model: "gemini-2.0-flash", Operation: "chat", Method: "POST", HttpStatus: 429,
		Headers: map[string]string{"content-type": "application/json; charset=UTF-8", "x-request-id": "bench"},
		Body:    providerBody,
	}
}

// statelessProfile is the default profile with fleet memory off, from the
// policy file the benchmark gives policyd (benchPolicy): nextdelay against
// nextdelay_stateless is the cost of fleet memory in one daemon.
const statelessProfile = "bench_stateless"

const benchPolicy = "profiles:\n  " + statelessProfile + ":\n    extends: default\n    fleet: off\n"

// scenario is one benchmarked call against one server.
type scenario struct {
	name   string
	server string // "echo", "durable" or "policyd"
	call   loadgen.Call
	// concurrency, when set, replaces --concurrency for this scenario.
	concurrency int
}

// attemptsPerContext is how many attempts a journaled scenario records in a
// context before it moves to a new one, like a retry loop that gives up.
const attemptsPerContext = 5

// contextID makes a distinct, valid UUID per run, scenario, worker and
// block of attempts, without a random source on the hot path.
func contextID(run uint32, scenario, worker, block int) string {
	return fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", run, scenario, worker&0xfff, 0, block)
}

func scenarios(run uint32, echoConn, durableConn, policydConn *grpc.ClientConn) []scenario {
	echo := testgrpc.NewTestServiceClient(echoConn)
	durable := testgrpc.NewTestServiceClient(durableConn)
	pc := policydv1.NewPolicyServiceClient(policydConn)
	jc := policydv1.NewJournalServiceClient(policydConn)
	failure := providerFailure()
	echoReq := &testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: []byte(providerBody)}, ResponseSize: 512}
	return []scenario{
		{"echo", "echo", func(ctx context.Context, _, _ int) error {
			_, err := echo.UnaryCall(ctx, echoReq)
			return err
		}, 0},
		// The same request to the durable echo: acknowledged once it is on
		// disk, the cheapest durable acknowledgement on the machine.
		{"durable", "durable", func(ctx context.Context, _, _ int) error {
			_, err := durable.UnaryCall(ctx, echoReq)
			return err
		}, 0},
		{"classify", "policyd", func(ctx context.Context, _, _ int) error {
			_, err := pc.Classify(ctx, &policydv1.ClassifyRequest{Failure: failure})
			return err
		}, 0},
		{"nextdelay", "policyd", func(ctx context.Context, _, seq int) error {
			_, err := pc.NextDelay(ctx, &policydv1.NextDelayRequest{Failure: failure, Attempt: int32(seq%attemptsPerContext + 1)})
			return err
		}, 0},
		{"nextdelay_stateless", "policyd", func(ctx context.Context, _, seq int) error {
			_, err := pc.NextDelay(ctx, &policydv1.NextDelayRequest{Failure: failure, Attempt: int32(seq%attemptsPerContext + 1), Profile: statelessProfile})
			return err
		}, 0},
		{"nextdelay_journaled", "policyd", func(ctx context.Context, w, seq int) error {
			resp, err := pc.NextDelay(ctx, &policydv1.NextDelayRequest{Failure: failure, Attempt: int32(seq%attemptsPerContext + 1),
				ContextId: contextID(run, 1, w, seq/attemptsPerContext)})
			if err == nil && !resp.GetDecision().GetJournaled() {
				return errNotJournaled
			}
			return err
		}, 0},
		// The same at 200 calls in flight, where batches grow and the cost per
		// row shows.
		{"nextdelay_journaled_200", "policyd", func(ctx context.Context, w, seq int) error {
			resp, err := pc.NextDelay(ctx, &policydv1.NextDelayRequest{Failure: failure, Attempt: int32(seq%attemptsPerContext + 1),
				ContextId: contextID(run, 3, w, seq/attemptsPerContext)})
			if err == nil && !resp.GetDecision().GetJournaled() {
				return errNotJournaled
			}
			return err
		}, 200},
		{"record_attempt", "policyd", func(ctx context.Context, w, seq int) error {
			_, err := jc.RecordAttempt(ctx, &policydv1.RecordAttemptRequest{Failure: failure, Attempt: int32(seq%attemptsPerContext + 1),
				ContextId: contextID(run, 2, w, seq/attemptsPerContext)})
			return err
		}, 0},
	}
}

// errNotJournaled counts a journaled NextDelay that answered without its
// journal write (the journal was slow or down) as a failed call: the
// benchmark measures durable decisions.
var errNotJournaled = fmt.Errorf("NextDelay answered journaled=false")
