// Command fetch GETs a web page under policyd's web_fetch profile, with one
// 30-second deadline for all attempts and waits.
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"time"

	policyd "github.com/policyd/policyd/clients/go"
)

func main() {
	client, err := policyd.Dial("", policyd.WithProfile("web_fetch"))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = client.Close() }()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	call := policyd.Call{Provider: "web", Operation: "web_fetch"}
	page, err := policyd.Do(ctx, client, call, func(ctx context.Context, attempt int) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, os.Args[1], nil)
		if err != nil {
			return nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if err := policyd.CheckResponse(resp); err != nil {
			return nil, err
		}
		return io.ReadAll(resp.Body)
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("fetched %d bytes\n", len(page))
}
