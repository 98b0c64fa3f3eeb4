package policyd

import (
	"encoding/json"
	"os"
	"slices"
	"testing"
	"time"
)

// clients/testdata/limits.json: the fleet protocol's limits, which the
// daemon's validation and the Python and TypeScript clients check too.
func TestFleetLimitsVectors(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../testdata/limits.json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Protocol map[string]json.RawMessage `json:"protocol"`
		Client   map[string]float64         `json:"client"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	num := func(name string) float64 {
		var f float64
		if err := json.Unmarshal(v.Protocol[name], &f); err != nil {
			t.Fatalf("protocol.%s: %v", name, err)
		}
		return f
	}
	ms := func(d time.Duration) float64 { return float64(d.Milliseconds()) }
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"usages_per_message", maxUsagesPerMsg, num("usages_per_message")},
		{"count_max", maxUsageCount, num("count_max")},
		{"elapsed_max_ms", ms(maxReportElapsed), num("elapsed_max_ms")},
		{"rate_limit_headers_max", maxRateLimits, num("rate_limit_headers_max")},
		{"rate_limit_value_bytes_max", maxRateLimitByte, num("rate_limit_value_bytes_max")},
		{"targets_per_stream", maxGateTargets, num("targets_per_stream")},
		{"target_field_bytes_max", maxFieldBytes, num("target_field_bytes_max")},
		{"key_id_bytes_max", maxLabelBytes, num("key_id_bytes_max")},
		{"client_id_bytes_max", maxLabelBytes, num("client_id_bytes_max")},
		{"input_tokens_per_call_max", maxCallInputTokens, num("input_tokens_per_call_max")},
		{"elapsed_min_ms", 1, v.Client["elapsed_min_ms"]},
		{"report_interval_ms", ms(reportEvery), v.Client["report_interval_ms"]},
		{"report_jitter", reportJitter, v.Client["report_jitter"]},
		{"first_assignment_wait_ms", ms(firstAnswerWait), v.Client["first_assignment_wait_ms"]},
		{"gate_grace_ms", ms(DefaultGateGrace), v.Client["gate_grace_ms"]},
		{"reconnect_initial_ms", ms(reconnectInitial), v.Client["reconnect_initial_ms"]},
		{"reconnect_max_ms", ms(reconnectMax), v.Client["reconnect_max_ms"]},
	} {
		if c.got != c.want {
			t.Errorf("%s: the client's %v, limits.json's %v", c.name, c.got, c.want)
		}
	}
	var prefixes []string
	if err := json.Unmarshal(v.Protocol["rate_limit_header_prefixes"], &prefixes); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(prefixes, rateLimitPrefixes) {
		t.Errorf("rate_limit_header_prefixes: the client's %q, limits.json's %q", rateLimitPrefixes, prefixes)
	}
}
