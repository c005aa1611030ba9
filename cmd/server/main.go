// Command dshd is the dshd server.
//
//	dshd [serve]   apply migrations, then serve the HTTP API (the default)
//	dshd migrate   apply migrations and exit
//	dshd devdb     start or reuse the development PostgreSQL in ./.data and prepare a
//	               development tenant, API key and preset (used by `make run`)
//	dshd rewrap-credentials
//	               wrap the data key of every stored tenant credential with the first key of
//	               DSHD_CREDENTIAL_KEYS (operator key rotation, docs/credentials-and-keys.md)
//	dshd version | chat | tail | sessions | presets
//	               client commands against a running server (internal/cli; README, "CLI")
//
// Configuration comes from the environment (config.go). SIGINT or SIGTERM shuts the server down
// gracefully: new connections are refused, SSE streams end cleanly, requests in flight finish.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dshd/dshd/internal/cli"
	"github.com/dshd/dshd/migrations"
	"github.com/dshd/dshd/pkg/pgstore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "dshd:", err)
		os.Exit(1)
	}
}

// run executes one subcommand; it returns when the command is done or ctx is cancelled.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return runServe(ctx, getenv, stderr)
	case "migrate":
		return runMigrate(ctx, getenv, stderr)
	case "devdb":
		return runDevDB(ctx, args, getenv, stdout)
	case "rewrap-credentials":
		return runRewrap(ctx, getenv, stdout)
	case "chat":
		// The chat answers Ctrl-C itself (it cancels the running turn): main's interrupt must
		// not end it; the chat ends itself on SIGTERM or SIGHUP.
		return cli.Run(context.WithoutCancel(ctx), cmd, args, cli.Env{Getenv: getenv, Stdin: os.Stdin, Stdout: stdout, Stderr: stderr})
	case "version", "tail", "sessions", "presets", "export", "import":
		return cli.Run(ctx, cmd, args, cli.Env{Getenv: getenv, Stdin: os.Stdin, Stdout: stdout, Stderr: stderr})
	case "help", "-h", "-help", "--help":
		fmt.Fprintln(stdout, "usage: dshd [serve | migrate | devdb [-dir .data] [-port 55432] | rewrap-credentials]")
		fmt.Fprintln(stdout, "       dshd "+cli.Usage)
		return nil
	}
	return fmt.Errorf("unknown command %q (want serve, migrate, devdb, rewrap-credentials, %s)", cmd, strings.Join(cli.Commands, ", "))
}

func runServe(ctx context.Context, getenv func(string) string, stderr io.Writer) error {
	m := NewMain()
	cfg, err := ParseConfig(getenv)
	if err != nil {
		return err
	}
	m.Config = cfg
	m.Logger = newLogger(stderr, cfg.LogLevel)
	if cfg.CPUProfile != "" {
		stopProfile, err := startCPUProfile(cfg.CPUProfile)
		if err != nil {
			return err
		}
		defer stopProfile()
	}
	if err := m.Run(ctx); err != nil {
		m.Close()
		return err
	}
	m.Logger.Info("serving", slog.String("addr", m.Addr()))
	<-ctx.Done()
	m.Logger.Info("shutting down")
	return m.Close()
}

func runMigrate(ctx context.Context, getenv func(string) string, stderr io.Writer) error {
	cfg, err := ParseConfig(getenv)
	if err != nil {
		return err
	}
	logger := newLogger(stderr, cfg.LogLevel)
	applied, err := migrations.Up(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	logger.Info("migrations applied", slog.Any("versions", applied))
	return nil
}

// runRewrap applies pending migrations and wraps every stored credential's data key with the
// active key of DSHD_CREDENTIAL_KEYS, and seals every webhook signing secret with it (those
// stored before a keyring was configured too); it prints what it did. It fails (and the old key must stay
// configured) when a credential does not unwrap with any configured key.
func runRewrap(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	cfg, err := ParseConfig(getenv)
	if err != nil {
		return err
	}
	if cfg.CredentialKeys == nil {
		return errors.New("rewrap-credentials: DSHD_CREDENTIAL_KEYS is not set")
	}
	if _, err := migrations.Up(ctx, cfg.DatabaseURL); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("rewrap-credentials: database: %w", err)
	}
	defer pool.Close()
	res, err := pgstore.NewCredentials(pool, cfg.CredentialKeys).Rewrap(ctx)
	fmt.Fprintf(stdout, "credentials rewrapped under key %q: %d rewrapped, %d already current, %d failed\n",
		cfg.CredentialKeys.ActiveID(), res.Rewrapped, res.Current, res.Failed)
	for _, f := range res.Failures {
		fmt.Fprintf(stdout, "failed: credential %s of tenant %s, wrapped by key %q: %s\n", f.CredentialID, f.TenantID, f.KeyID, f.Reason)
	}
	hooks, herr := pgstore.NewStore(pool, pgstore.StoreConfig{SecretKeys: cfg.CredentialKeys}).Webhooks().WebhookRewrap(ctx)
	fmt.Fprintf(stdout, "webhook signing secrets sealed under key %q: %d sealed, %d already current, %d failed\n",
		cfg.CredentialKeys.ActiveID(), hooks.Rewrapped, hooks.Current, hooks.Failed)
	return errors.Join(err, herr)
}

// startCPUProfile writes a CPU profile to path until the returned function is called.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("DSHD_CPU_PROFILE: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("DSHD_CPU_PROFILE: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

func newLogger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
}

// errClosed is returned by Run on a closed Main.
var errClosed = errors.New("dshd: closed")
