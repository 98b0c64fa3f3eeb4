// Command policyd-fakeprovider serves a fake LLM provider on 127.0.0.1
// (internal/fakeprovider): OpenAI's chat completions and Anthropic's
// messages, with request and token limits per API key and their real
// headers. The client suites' real-SDK tests start it, read the address
// from its first line of output ("listening on http://127.0.0.1:PORT"),
// and point the SDKs' base URL at it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/policyd/policyd/internal/fakeprovider"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "policyd-fakeprovider:", err)
		os.Exit(2)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("policyd-fakeprovider", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	var cfg fakeprovider.Config
	fs.Int64Var(&cfg.Limits.Requests, "rpm", 0, "requests a minute per API key (0: no limit)")
	fs.Int64Var(&cfg.Limits.Tokens, "tpm", 0, "OpenAI: tokens a minute per API key, prompt and completion (0: no limit)")
	fs.Int64Var(&cfg.Limits.InputTokens, "itpm", 0, "Anthropic: input tokens a minute per API key (0: no limit)")
	fs.Int64Var(&cfg.Limits.OutputTokens, "otpm", 0, "Anthropic: output tokens a minute per API key (0: no limit)")
	fs.Int64Var(&cfg.ReplyTokens, "reply-tokens", 20, "tokens in every reply (cut to the request's max_tokens)")
	fs.DurationVar(&cfg.ChunkDelay, "chunk-delay", 0, "pause between a streamed reply's chunks")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for name, v := range map[string]int64{"-rpm": cfg.Limits.Requests, "-tpm": cfg.Limits.Tokens, "-itpm": cfg.Limits.InputTokens, "-otpm": cfg.Limits.OutputTokens, "-reply-tokens": cfg.ReplyTokens} {
		if v < 0 {
			return fmt.Errorf("flag %s: %d is negative", name, v)
		}
	}
	if cfg.ChunkDelay < 0 {
		return fmt.Errorf("flag -chunk-delay: %v is negative", cfg.ChunkDelay)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("flag -listen: %w", err)
	}
	srv := &http.Server{Handler: fakeprovider.New(cfg), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "listening on http://%s\n", ln.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
