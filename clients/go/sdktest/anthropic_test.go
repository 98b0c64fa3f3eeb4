package sdktest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	policyd "github.com/policyd/policyd/clients/go"
	"github.com/policyd/policyd/clients/go/internal/proctest"
)

// anthropic-sdk-go through the transport, its own retries off, against the
// fake provider's Anthropic API.

// anthropicClient is an anthropic-sdk-go client of the fake provider at
// base through pd's transport.
func anthropicClient(pd *policyd.Client, base string) anthropic.Client {
	return anthropic.NewClient(option.WithBaseURL(base), option.WithAPIKey("k1"),
		option.WithHTTPClient(pd.HTTPClient(policyd.TransportOptions{Provider: "anthropic"})), option.WithMaxRetries(0))
}

func messageParams() anthropic.MessageNewParams {
	return anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 64,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Say hi"))}}
}

func TestAnthropic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("a success, streamed or not, asks policyd nothing", func(t *testing.T) {
		t.Parallel()
		p := fakeProvider(t)
		var r rpcs
		ac := anthropicClient(client(t, false, r.option()), p.URL)
		msg, err := ac.Messages.New(ctx, messageParams())
		if err != nil || len(msg.Content) != 1 || !strings.HasPrefix(msg.Content[0].Text, "ok! ") {
			t.Fatalf("New = %+v, %v; want the fake's answer", msg, err)
		}
		stream := ac.Messages.NewStreaming(ctx, messageParams())
		var text strings.Builder
		for stream.Next() {
			if ev := stream.Current(); ev.Type == "content_block_delta" {
				text.WriteString(ev.Delta.Text)
			}
		}
		if stream.Err() != nil || text.String() != strings.Repeat("ok! ", 20) {
			t.Fatalf("stream: %q, %v; want 20 tokens", text.String(), stream.Err())
		}
		if n := r.count("NextDelay"); n != 0 {
			t.Errorf("%d NextDelay RPCs, want 0", n)
		}
	})

	t.Run("a 529 is retried by policyd: the SDK sees the success", func(t *testing.T) {
		t.Parallel()
		p := fakeProvider(t)
		fail(t, p, proctest.Failure{Status: 529})
		ac := anthropicClient(client(t, false), p.URL)
		if _, err := ac.Messages.New(ctx, messageParams()); err != nil {
			t.Fatalf("New = %v, want the retry's success", err)
		}
		if s := stats(t, p); s.Requests != 2 || s.Failed != 1 || s.OK != 1 {
			t.Errorf("fake provider saw %+v, want the 529, then the success", s)
		}
	})

	t.Run("a 429's retry-after is waited for", func(t *testing.T) {
		t.Parallel()
		p := fakeProvider(t)
		fail(t, p, proctest.Failure{Status: 429, RetryAfter: "1",
			Body: `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit"}}`})
		ac := anthropicClient(client(t, false), p.URL)
		start := time.Now()
		if _, err := ac.Messages.New(ctx, messageParams()); err != nil {
			t.Fatalf("New = %v, want the retry's success", err)
		}
		if took := time.Since(start); took < time.Second {
			t.Errorf("took %v, want at least the 1 s retry-after", took)
		}
		if s := stats(t, p); s.Requests != 2 || s.OK != 1 {
			t.Errorf("fake provider saw %+v, want the 429, then the success", s)
		}
	})

	t.Run("a 400 is the SDK's own error, at once", func(t *testing.T) {
		t.Parallel()
		p := fakeProvider(t)
		fail(t, p, proctest.Failure{Status: 400, Body: `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: too large"}}`})
		ac := anthropicClient(client(t, false), p.URL)
		_, err := ac.Messages.New(ctx, messageParams())
		var apiErr *anthropic.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(err.Error(), "max_tokens: too large") {
			t.Fatalf("New = %v, want an *anthropic.Error 400 with the provider's message", err)
		}
		if s := stats(t, p); s.Requests != 1 {
			t.Errorf("fake provider saw %d requests, want 1", s.Requests)
		}
	})

	t.Run("a cut stream is the SDK's error, not retried", func(t *testing.T) {
		t.Parallel()
		p := fakeProvider(t)
		fail(t, p, proctest.Failure{CutStream: true})
		ac := anthropicClient(client(t, false), p.URL)
		stream := ac.Messages.NewStreaming(ctx, messageParams())
		for stream.Next() {
		}
		if stream.Err() == nil {
			t.Fatal("the stream ended without an error")
		}
		if s := stats(t, p); s.Requests != 1 {
			t.Errorf("fake provider saw %d requests, want exactly 1", s.Requests)
		}
	})
}

// The README's anthropic-sdk-go line, as written: a 529 is retried.
func TestREADMEAnthropic(t *testing.T) {
	t.Parallel()
	p := fakeProvider(t)
	fail(t, p, proctest.Failure{Status: 529})
	pd := client(t, false)

	claude := anthropic.NewClient(option.WithHTTPClient(pd.HTTPClient(policyd.TransportOptions{Provider: "anthropic", KeyID: "prod"})),
		option.WithMaxRetries(0))

	msg, err := claude.Messages.New(context.Background(), messageParams(),
		option.WithBaseURL(p.URL), option.WithAPIKey("k1"))
	if err != nil || len(msg.Content) != 1 {
		t.Fatalf("New = %v, want the retry's answer", err)
	}
	if s := stats(t, p); s.Requests != 2 || s.OK != 1 {
		t.Errorf("fake provider saw %+v, want the 529, then the success", s)
	}
}
