// Command mockllm serves the scripted model over the OpenAI chat-completions protocol, for
// tests, demos and benchmarks. Point an OpenAI-compatible client at http://<addr>/v1 (or the
// root) and write scripts such as "tools:4" or "text" as the user message; see
// pkg/llm/scripted for the grammar.
//
//	mockllm -addr 127.0.0.1:8089 [-api-key KEY]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/dshd/dshd/internal/mockllm"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mockllm:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("mockllm", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8089", "listen address")
	apiKey := fs.String("api-key", "", "require this bearer key (default: accept any)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	ms := mockllm.New(mockllm.Config{APIKey: *apiKey})
	srv := &http.Server{Handler: ms.Handler(), ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("mockllm listening on http://%s/v1\n", ln.Addr())

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	ms.Close()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
