package fakeprovider

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// replyText is a reply of n tokens (four bytes each).
func replyText(n int64) string { return strings.Repeat("ok! ", int(n)) }

// wholeReply is a whole (non-streamed) reply in the API's shape.
func wholeReply(a api, model string, in, out int64) map[string]any {
	text := replyText(out)
	if a == openAI {
		return map[string]any{
			"id": "chatcmpl-fake", "object": "chat.completion", "created": time.Now().Unix(), "model": model,
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
				"message": map[string]any{"role": "assistant", "content": text}}},
			"usage": map[string]any{"prompt_tokens": in, "completion_tokens": out, "total_tokens": in + out},
		}
	}
	return map[string]any{
		"id": "msg_fake", "type": "message", "role": "assistant", "model": model,
		"content":     []any{map[string]any{"type": "text", "text": text}},
		"stop_reason": "end_turn", "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": in, "output_tokens": out},
	}
}

// stream writes a streamed reply as server-sent events, one token a chunk;
// cutAfterFirst cuts the connection after the first content chunk.
func (p *Provider) stream(w http.ResponseWriter, a api, q request, in, out int64, cutAfterFirst bool) {
	w.Header().Set("content-type", "text/event-stream")
	w.Header().Set("cache-control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flush := func() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	send := func(event string, data any) {
		b, _ := json.Marshal(data)
		if event != "" {
			fmt.Fprintf(w, "event: %s\n", event)
		}
		fmt.Fprintf(w, "data: %s\n\n", b)
		flush()
	}
	chunk := func(i int64) {
		if i > 0 && p.cfg.ChunkDelay > 0 {
			time.Sleep(p.cfg.ChunkDelay)
		}
		if a == openAI {
			send("", map[string]any{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": q.Model,
				"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": "ok! "}, "finish_reason": nil}}})
			return
		}
		send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "text_delta", "text": "ok! "}})
	}
	if a == anthropic {
		send("message_start", map[string]any{"type": "message_start", "message": map[string]any{
			"id": "msg_fake", "type": "message", "role": "assistant", "model": q.Model, "content": []any{},
			"stop_reason": nil, "stop_sequence": nil, "usage": map[string]any{"input_tokens": in, "output_tokens": 1}}})
		send("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
			"content_block": map[string]any{"type": "text", "text": ""}})
	}
	for i := range out {
		chunk(i)
		if cutAfterFirst {
			cut(w)
			return
		}
	}
	if a == openAI {
		send("", map[string]any{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": q.Model,
			"choices": []any{map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": "stop"}}})
		if q.StreamOptions.IncludeUsage {
			send("", map[string]any{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": q.Model,
				"choices": []any{}, "usage": map[string]any{"prompt_tokens": in, "completion_tokens": out, "total_tokens": in + out}})
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
		flush()
		return
	}
	send("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	send("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil}, "usage": map[string]any{"output_tokens": out}})
	send("message_stop", map[string]any{"type": "message_stop"})
}
