package policyd

import (
	"fmt"
	"strings"
	"testing"
)

// The scanner finds the first input-token count and the last output-token
// count in a body however it is cut into reads: every body here is scanned
// whole, split in two at every byte, and a byte at a time.
func TestUsageScanner(t *testing.T) {
	tests := []struct {
		name        string
		body        string
		want        uint64
		found       bool
		output      uint64
		foundOutput bool
	}{
		{name: "openai chat", body: `{"id":"c","choices":[],"usage":{"prompt_tokens":1234,"completion_tokens":5,"total_tokens":1239}}`, want: 1234, found: true, output: 5, foundOutput: true},
		{name: "anthropic message", body: `{"id":"m","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":77,"output_tokens":3}}`, want: 77, found: true, output: 3, foundOutput: true},
		{name: "whitespace after the colon", body: "{\"usage\": {\"prompt_tokens\": \n\t\r 42 ,\"completion_tokens\":1}}", want: 42, found: true, output: 1, foundOutput: true},
		{name: "output_tokens_details is not the count", body: `{"usage":{"input_tokens":5,"output_tokens":40,"output_tokens_details":{"reasoning_tokens":30}}}`,
			want: 5, found: true, output: 40, foundOutput: true},
		{name: "input_tokens_details is not the count", body: `{"usage":{"input_tokens_details":{"cached_tokens":9},"input_tokens":31}}`, want: 31, found: true},
		{name: "cache_read_input_tokens is not the count", body: `{"usage":{"cache_read_input_tokens":500,"input_tokens":12}}`, want: 12, found: true},
		{name: "the first count", body: `{"usage":{"prompt_tokens":10},"x":{"input_tokens":20}}`, want: 10, found: true},
		{name: "a value that is no number is passed over", body: `{"a":{"input_tokens":null},"usage":{"input_tokens":8}}`, want: 8, found: true},
		{name: "a key inside a string is not a key", body: `{"text":"say \"prompt_tokens\": 99","usage":{"prompt_tokens":4}}`, want: 4, found: true},
		{
			name: "anthropic stream: message_start",
			body: "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n" +
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"ok! \"}}\n\n" +
				"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":7}}\n\n",
			want: 25, found: true, output: 7, foundOutput: true, // the last: message_delta's
		},
		{
			name: "openai stream: the usage chunk",
			body: "data: {\"choices\":[{\"delta\":{\"content\":\"ok! \"}}]}\n\n" +
				"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":300,\"completion_tokens\":2,\"total_tokens\":302}}\n\ndata: [DONE]\n\n",
			want: 300, found: true, output: 2, foundOutput: true,
		},
		{
			name: "openai responses stream: response.completed",
			body: "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"ok\"}\n\n" +
				"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":36,\"input_tokens_details\":{\"cached_tokens\":0},\"output_tokens\":87,\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":123}}}\n\n",
			want: 36, found: true, output: 87, foundOutput: true,
		},
		{name: "no input count", body: `{"id":"c","usage":{"completion_tokens":5,"output_tokens":6,"total_tokens":11}}`, output: 6, foundOutput: true},
		{name: "cut in the output number", body: `{"usage":{"input_tokens":3,"output_tokens":12`, want: 3, found: true},
		{name: "an anthropic stream cut before message_delta", body: "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n",
			want: 25, found: true, output: 1, foundOutput: true},
		{name: "an openai stream without usage", body: "data: {\"choices\":[{\"delta\":{\"content\":\"ok! \"}}]}\n\ndata: [DONE]\n\n"},
		{name: "cut before the count", body: `{"id":"c","usage":{"prompt_tok`},
		{name: "cut after the key", body: `{"usage":{"prompt_tokens": `},
		{name: "cut in the number", body: `{"usage":{"prompt_tokens":12`},
		{name: "empty", body: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check := func(how string, pieces []string) {
				t.Helper()
				var s usageScanner
				for _, p := range pieces {
					s.scan([]byte(p))
				}
				if got, ok := s.found(); ok != tt.found || got != tt.want {
					t.Fatalf("%s: got %d, %v; want %d, %v", how, got, ok, tt.want, tt.found)
				}
				if got, ok := s.foundOutput(); ok != tt.foundOutput || got != tt.output {
					t.Fatalf("%s: output %d, %v; want %d, %v", how, got, ok, tt.output, tt.foundOutput)
				}
			}
			check("whole", []string{tt.body})
			for i := range len(tt.body) {
				check(fmt.Sprintf("split at %d", i), []string{tt.body[:i], tt.body[i:]})
			}
			check("a byte at a time", strings.Split(tt.body, ""))
		})
	}
}

// Once found, the input count stays: later reads change nothing; the
// output count is the last one read.
func TestUsageScannerCountsOnce(t *testing.T) {
	var s usageScanner
	s.scan([]byte(`{"usage":{"input_tokens":5,`))
	s.scan([]byte(`"input_tokens":6}, {"prompt_tokens":7}`))
	s.scan([]byte(`{"output_tokens":1},{"output_tokens":90}`))
	if got, ok := s.found(); !ok || got != 5 {
		t.Fatalf("got %d, %v; want the first count, 5", got, ok)
	}
	if got, ok := s.foundOutput(); !ok || got != 90 {
		t.Fatalf("output %d, %v; want the last count, 90", got, ok)
	}
}

// A number without end stops growing.
func TestUsageScannerBoundsTheNumber(t *testing.T) {
	var s usageScanner
	s.scan([]byte(`{"input_tokens":` + strings.Repeat("9", 40) + `}`))
	if got, ok := s.found(); !ok || got != maxScannedCount {
		t.Fatalf("got %d, %v; want %d", got, ok, uint64(maxScannedCount))
	}
}
