// Command chat asks an OpenAI-compatible chat API one question; policyd
// decides whether and when to retry. OPENAI_BASE_URL and OPENAI_API_KEY
// say where and as whom; POLICYD_ADDR where policyd listens.
package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strings"

	policyd "github.com/policyd/policyd/clients/go"
)

func main() {
	client, err := policyd.Dial("") // $POLICYD_ADDR, else 127.0.0.1:7433
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = client.Close() }()

	url := cmp.Or(os.Getenv("OPENAI_BASE_URL"), "https://api.openai.com/v1") + "/chat/completions"
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hi"}]}`
	call := policyd.Call{Provider: "openai", Model: "gpt-4o-mini", Operation: "chat"}
	answer, err := policyd.Do(context.Background(), client, call, func(ctx context.Context, attempt int) ([]byte, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+os.Getenv("OPENAI_API_KEY"))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err // a network error: policyd decides
		}
		defer resp.Body.Close()
		if err := policyd.CheckResponse(resp); err != nil {
			return nil, err // 429, 5xx, 401, ...: policyd decides
		}
		return io.ReadAll(resp.Body)
	})
	if err != nil {
		log.Fatal(err) // the last error, why policyd stopped, and what to do about it
	}
	fmt.Println(string(answer))
}
