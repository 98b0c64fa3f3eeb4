package server

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

// Anthropic's output-token headers and the output the responses reported
// pace the bucket on output tokens, and FleetService shows the limit.
func TestCoordinateOutputTokens(t *testing.T) {
	h := newStreamHarness(t, streamTestPolicy)
	ctx := testContext(t)
	sonnet := &policydv1.BucketTarget{Provider: "anthropic", Model: "claude-sonnet", KeyId: "prod"}
	// Anthropic's headers, as its "Rate limits" page lists them.
	headers := map[string]string{
		"anthropic-ratelimit-requests-limit": "4000", "anthropic-ratelimit-requests-remaining": "3990",
		"anthropic-ratelimit-input-tokens-limit": "400000", "anthropic-ratelimit-input-tokens-remaining": "390000",
		"anthropic-ratelimit-output-tokens-limit": "60000", "anthropic-ratelimit-output-tokens-remaining": "2000",
	}
	var streams []*testStream
	for _, c := range []string{"agent-1", "agent-2"} {
		s := h.open(ctx, c)
		// 10 calls a second, each producing 400 output tokens: 8,000 output
		// tokens a second for the two against a limit of 1,000.
		s.report(&policydv1.BucketUsage{Target: sonnet, Elapsed: durationpb.New(10 * time.Second), Admitted: 100,
			Succeeded: 100, OutputTokensUsed: 40000, OutputTokensUsedCalls: 100, RateLimitHeaders: headers})
		streams = append(streams, s)
	}
	streams[1].report(&policydv1.BucketUsage{Target: sonnet, Admitted: 1})
	var a *policydv1.Assignment
	for a == nil {
		m, err := streams[1].s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range m.GetAssignments() {
			if x.GetTarget().GetModel() == sonnet.Model && x.GetAdmitFraction() < 1 {
				a = x
			}
		}
	}
	// 930 output tokens a second of room for 8,000: about 0.12.
	if f := a.GetAdmitFraction(); f < 0.1 || f > 0.13 || !strings.Contains(a.GetReason(), "pacing a limit of 60000 output tokens a minute") {
		t.Fatalf("assignment %v", a)
	}
	b, err := h.fc.GetBucket(ctx, &policydv1.GetBucketRequest{Bucket: "rate_limit:anthropic/claude-sonnet@prod"})
	if err != nil {
		t.Fatal(err)
	}
	var output *policydv1.ProviderLimit
	for _, l := range b.GetBucket().GetLimits() {
		if l.GetName() == "output_tokens" {
			output = l
		}
	}
	if output == nil || output.GetPerMinute() != 60000 || !output.GetPacing() || output.GetRemaining() != 2000 {
		t.Fatalf("limits %v", b.GetBucket().GetLimits())
	}
}
