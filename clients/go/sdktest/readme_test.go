package sdktest

import (
	"context"
	"log"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	policyd "github.com/policyd/policyd/clients/go"
	"github.com/policyd/policyd/clients/go/internal/proctest"
)

// The README's opening lines run as written (clients/go's readme_test.go
// checks that they are these), configured from the environment as a
// program would be: POLICYD_ADDR, OPENAI_BASE_URL and OPENAI_API_KEY. A 503
// is retried by policyd; openai-go sees the success.
func TestREADMEOpening(t *testing.T) {
	p := fakeProvider(t)
	fail(t, p, proctest.Failure{Status: 503})
	t.Setenv("POLICYD_ADDR", daemonAddr(t, false))
	t.Setenv("OPENAI_BASE_URL", p.URL+"/v1")
	t.Setenv("OPENAI_API_KEY", "k1")

	pd, err := policyd.Dial("") // $POLICYD_ADDR, else 127.0.0.1:7433
	if err != nil {
		log.Fatal(err)
	}
	defer pd.Close()
	client := openai.NewClient(option.WithHTTPClient(pd.HTTPClient(policyd.TransportOptions{Provider: "openai"})), option.WithMaxRetries(0))

	resp, err := client.Chat.Completions.New(context.Background(), chatParams("gpt-4o"))
	if err != nil || len(resp.Choices) != 1 || !strings.HasPrefix(resp.Choices[0].Message.Content, "ok! ") {
		t.Fatalf("New = %v, want the retry's answer", err)
	}
	if s := stats(t, p); s.Requests != 2 || s.OK != 1 {
		t.Errorf("fake provider saw %+v, want the 503, then the success", s)
	}
}
