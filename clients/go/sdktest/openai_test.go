package sdktest

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	policyd "github.com/policyd/policyd/clients/go"
	"github.com/policyd/policyd/clients/go/internal/proctest"
)

// openai-go through the transport, its own retries off, against the fake
// provider's OpenAI API.

// openAI is an openai-go client of the fake provider at base through pd's
// transport.
func openAI(pd *policyd.Client, base string, opts policyd.TransportOptions) openai.Client {
	return openai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("k1"),
		option.WithHTTPClient(pd.HTTPClient(opts)), option.WithMaxRetries(0))
}

func chatParams(model string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hi")}}
}

func TestOpenAI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("a success, streamed or not, asks policyd nothing", func(t *testing.T) {
		t.Parallel()
		p := fakeProvider(t)
		var r rpcs
		oc := openAI(client(t, false, r.option()), p.URL, policyd.TransportOptions{})
		resp, err := oc.Chat.Completions.New(ctx, chatParams("gpt-4o"))
		if err != nil || len(resp.Choices) != 1 || !strings.HasPrefix(resp.Choices[0].Message.Content, "ok! ") {
			t.Fatalf("New = %+v, %v; want the fake's answer", resp, err)
		}
		stream := oc.Chat.Completions.NewStreaming(ctx, chatParams("gpt-4o"))
		var text strings.Builder
		for stream.Next() {
			if ch := stream.Current().Choices; len(ch) > 0 {
				text.WriteString(ch[0].Delta.Content)
			}
		}
		if stream.Err() != nil || text.String() != strings.Repeat("ok! ", 20) {
			t.Fatalf("stream: %q, %v; want 20 tokens", text.String(), stream.Err())
		}
		if s := stats(t, p); s.Requests != 2 || s.OK != 2 || s.Streams != 1 {
			t.Errorf("fake provider saw %+v, want 2 requests, 1 streamed", s)
		}
		if n := r.count("NextDelay"); n != 0 {
			t.Errorf("%d NextDelay RPCs, want 0", n)
		}
	})

	t.Run("a 503 is retried by policyd: the SDK sees the success", func(t *testing.T) {
		t.Parallel()
		p := fakeProvider(t)
		fail(t, p, proctest.Failure{Status: 503, Count: 2})
		var r rpcs
		oc := openAI(client(t, false, r.option()), p.URL, policyd.TransportOptions{})
		resp, err := oc.Chat.Completions.New(ctx, chatParams("gpt-4o"))
		if err != nil || len(resp.Choices) != 1 {
			t.Fatalf("New = %v, want the third attempt's success", err)
		}
		if s := stats(t, p); s.Requests != 3 || s.Failed != 2 || s.OK != 1 {
			t.Errorf("fake provider saw %+v, want 2 failures, then the success", s)
		}
		if n := r.count("NextDelay"); n != 2 {
			t.Errorf("%d NextDelay RPCs, want 2", n)
		}
	})

	t.Run("a 401 is the SDK's own error, at once", func(t *testing.T) {
		t.Parallel()
		p := fakeProvider(t)
		fail(t, p, proctest.Failure{Status: 401, Body: `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`})
		oc := openAI(client(t, false), p.URL, policyd.TransportOptions{})
		_, err := oc.Chat.Completions.New(ctx, chatParams("gpt-4o"))
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 || apiErr.Code != "invalid_api_key" {
			t.Fatalf("New = %v, want an *openai.Error 401 invalid_api_key", err)
		}
		if s := stats(t, p); s.Requests != 1 {
			t.Errorf("fake provider saw %d requests, want 1", s.Requests)
		}
	})

	t.Run("a 429 the deadline cannot wait for is the SDK's RateLimit error", func(t *testing.T) {
		t.Parallel()
		p := fakeProvider(t)
		fail(t, p, proctest.Failure{Status: 429, RetryAfter: "20"})
		oc := openAI(client(t, false), p.URL, policyd.TransportOptions{})
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		start := time.Now()
		_, err := oc.Chat.Completions.New(ctx, chatParams("gpt-4o"))
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || time.Since(start) > 3*time.Second {
			t.Fatalf("New = %v after %v, want the 429 at once", err, time.Since(start))
		}
	})

	t.Run("a cut stream is the SDK's error, not retried", func(t *testing.T) {
		t.Parallel()
		p := fakeProvider(t)
		fail(t, p, proctest.Failure{CutStream: true})
		var r rpcs
		oc := openAI(client(t, false, r.option()), p.URL, policyd.TransportOptions{})
		stream := oc.Chat.Completions.NewStreaming(ctx, chatParams("gpt-4o"))
		chunks := 0
		for stream.Next() {
			chunks++
		}
		if stream.Err() == nil || chunks != 1 {
			t.Fatalf("stream: %d chunks, %v; want 1 chunk, then the cut's error", chunks, stream.Err())
		}
		if s := stats(t, p); s.Requests != 1 {
			t.Errorf("fake provider saw %d requests, want exactly 1", s.Requests)
		}
		if n := r.count("NextDelay"); n != 0 {
			t.Errorf("%d NextDelay RPCs, want 0: a cut after the first byte is not decided", n)
		}
	})

	t.Run("the fleet gate's stop is the client's error, and nothing is sent", func(t *testing.T) {
		t.Parallel()
		p := fakeProvider(t)
		pd := client(t, true, policyd.WithParkLimit(0))
		oc := openAI(pd, p.URL, policyd.TransportOptions{KeyID: "gated"})
		if _, err := oc.Chat.Completions.New(ctx, chatParams("gpt-4o-gated")); err != nil {
			t.Fatalf("the first call: %v", err)
		}
		// Three overloaded answers to three retries of one client open the
		// model's breaker (the test policy's min_volume 3, min_clients 1).
		other := client(t, true, policyd.WithParkLimit(0))
		fail(t, p, proctest.Failure{Status: 503, Count: 3})
		failing := openAI(other, p.URL, policyd.TransportOptions{})
		_, _ = failing.Chat.Completions.New(ctx, chatParams("gpt-4o-gated"))
		deadline := time.Now().Add(10 * time.Second)
		for {
			before := stats(t, p).Requests
			_, err := oc.Chat.Completions.New(ctx, chatParams("gpt-4o-gated"))
			var pe *policyd.Error
			if errors.Is(err, policyd.ErrNotAdmitted) && errors.As(err, &pe) {
				if pe.Decision.StopReason != policyd.StopCircuitOpen || stats(t, p).Requests != before {
					t.Fatalf("stopped with %v after %d requests, want CIRCUIT_OPEN and none", pe.Decision.StopReason, stats(t, p).Requests-before)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the gate never stopped a call (last: %v)", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}
