package policyd_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	policyd "github.com/policyd/policyd/clients/go"
)

// The examples that need a daemon are compiled, not run: their output
// depends on the network. readme_test.go runs the README's programs against
// a real policyd instead.

func ExampleClient_Do() {
	client, err := policyd.Dial("") // $POLICYD_ADDR, else 127.0.0.1:7433
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	call := policyd.Call{Provider: "web", Operation: "web_fetch", Profile: "web_fetch"}
	err = client.Do(context.Background(), call, func(ctx context.Context, attempt int) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://example.com/", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if err := policyd.CheckResponse(resp); err != nil {
			return err
		}
		_, err = io.Copy(os.Stdout, resp.Body)
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
}

func ExampleCall_fallback() {
	client, err := policyd.Dial("")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	call := policyd.Call{Provider: "openai", Model: "gpt-4o", Operation: "chat"}

	model := "gpt-4o"
	call.Fallback = func(ctx context.Context, call policyd.Call, fb policyd.Fallback) (policyd.Call, error) {
		if fb.Kind != policyd.FallbackLargerContextModel {
			return call, fb.Err
		}
		model, call.Model = "gpt-4.1", "gpt-4.1"
		return call, nil
	}

	err = client.Do(context.Background(), call, func(ctx context.Context, attempt int) error {
		fmt.Println("asking", model)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}

func ExampleFailureFromError() {
	err := fmt.Errorf("stream completion: %w",
		&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)})
	f := policyd.FailureFromError(policyd.MidStream(err))
	fmt.Println(f.ErrorName, f.ErrorCode, f.Phase)
	for _, c := range f.Causes {
		fmt.Printf("%s %q\n", c.Name, c.Code)
	}
	// Output:
	// *net.OpError ECONNRESET MID_STREAM
	// *net.OpError ""
	// *os.SyscallError ""
	// syscall.Errno "ECONNRESET"
}

func ExampleFailOpenPolicy_Decide() {
	now := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	rnd := rand.New(rand.NewPCG(1, 2))
	for _, f := range []*policyd.Failure{
		{Operation: "chat", HTTPStatus: 429, Headers: map[string]string{"retry-after": "2"}},
		{Operation: "chat", HTTPStatus: 401},
	} {
		d := policyd.DefaultFailOpenPolicy.Decide(f, 1, policyd.SafetyUnspecified, now, time.Time{}, rnd)
		fmt.Println(d.Action, d.Delay, d.FailureType, d.Rule)
	}
	// Output:
	// RETRY 2s RATE_LIMIT fail_open.rate_limit
	// STOP 0s AUTH_INVALID fail_open.status
}

func ExampleWithToken() {
	client, err := policyd.Dial("policyd.internal:7433",
		policyd.WithToken(os.Getenv("AGENT_POLICYD_TOKEN")),
		policyd.WithTLS("/etc/policyd/ca.pem"), // "" for the system roots
		policyd.WithClientCert("/etc/policyd/agent.pem", "/etc/policyd/agent-key.pem"))
	if err != nil {
		log.Fatal(err) // e.g. a CA or certificate file that cannot be read
	}
	defer client.Close()
}

func ExampleClient_ObserveRateLimits() {
	client, err := policyd.Dial("")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	url := "https://api.openai.com/v1/chat/completions"

	call := policyd.Call{Provider: "openai", Model: "gpt-4o", KeyID: "prod-key", Operation: "chat"}
	err = client.Do(context.Background(), call, func(ctx context.Context, attempt int) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if err := policyd.CheckResponse(resp); err != nil {
			return err
		}
		client.ObserveRateLimits(call, resp.Header) // x-ratelimit-*: policyd paces the fleet to the limit
		return nil
	})
	if errors.Is(err, policyd.ErrNotAdmitted) {
		// The gate did not send it: an open breaker, a stopped key, shed
		// load, or a hold past the deadline; err says which and why.
		log.Print(err)
	}
}
