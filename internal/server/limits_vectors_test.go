package server

import (
	"encoding/json"
	"os"
	"slices"
	"testing"

	"github.com/policyd/policyd/internal/validate"
)

// TestFleetLimitsVectors checks the daemon's Coordinate limits against
// clients/testdata/limits.json, which the three clients' tests read too:
// the protocol's limits live in one place.
func TestFleetLimitsVectors(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../clients/testdata/limits.json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Protocol struct {
			UsagesPerMessage        int      `json:"usages_per_message"`
			CountMax                int64    `json:"count_max"`
			ElapsedMaxMs            int64    `json:"elapsed_max_ms"`
			RateLimitHeadersMax     int      `json:"rate_limit_headers_max"`
			RateLimitValueBytesMax  int      `json:"rate_limit_value_bytes_max"`
			RateLimitHeaderPrefixes []string `json:"rate_limit_header_prefixes"`
			TargetsPerStream        int      `json:"targets_per_stream"`
			TargetFieldBytesMax     int      `json:"target_field_bytes_max"`
			KeyIDBytesMax           int      `json:"key_id_bytes_max"`
			ClientIDBytesMax        int      `json:"client_id_bytes_max"`
			InputTokensPerCallMax   int64    `json:"input_tokens_per_call_max"`
		} `json:"protocol"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	p := v.Protocol
	for _, c := range []struct {
		name      string
		got, want int64
	}{
		{"usages_per_message", validate.MaxUsages, int64(p.UsagesPerMessage)},
		{"count_max", validate.MaxCallsPerSecond, p.CountMax}, // per report: a second of calls, the least interval policyd counts
		{"elapsed_max_ms", validate.MaxReportInterval.Milliseconds(), p.ElapsedMaxMs},
		{"rate_limit_headers_max", validate.MaxRateLimitHeaders, int64(p.RateLimitHeadersMax)},
		{"rate_limit_value_bytes_max", validate.MaxRateLimitValueBytes, int64(p.RateLimitValueBytesMax)},
		{"targets_per_stream", maxStreamTargets, int64(p.TargetsPerStream)},
		{"target_field_bytes_max", validate.MaxFieldBytes, int64(p.TargetFieldBytesMax)},
		{"key_id_bytes_max", validate.MaxLabelBytes, int64(p.KeyIDBytesMax)},
		{"client_id_bytes_max", validate.MaxLabelBytes, int64(p.ClientIDBytesMax)},
		{"input_tokens_per_call_max", validate.MaxInputTokensPerCall, p.InputTokensPerCallMax},
	} {
		if c.got != c.want {
			t.Errorf("%s: the daemon's %d, limits.json's %d", c.name, c.got, c.want)
		}
	}
	if !slices.Equal(validate.RateLimitHeaderPrefixes, p.RateLimitHeaderPrefixes) {
		t.Errorf("rate_limit_header_prefixes: the daemon's %q, limits.json's %q", validate.RateLimitHeaderPrefixes, p.RateLimitHeaderPrefixes)
	}
}
