package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dshd/dshd/internal/mockllm"
	"github.com/dshd/dshd/internal/pgcluster"
)

// env is what the self-contained mode starts: a PostgreSQL cluster with normal durability, the
// mock model in this process and the server as a child process. close stops them in reverse order.
type env struct {
	dir           string
	databaseURL   string
	pgDataDir     string
	mockURL       string // base URL of the mock model, http://127.0.0.1:port
	mock          *mockllm.Server
	serverURL     string
	serverPID     int
	postmasterPID int
	serverLog     string
	adminToken    string
	closers       []func()

	// The self-contained server, so that it can be restarted (with a CPU profile).
	serverBin, serverLogLevel string
	stopServer                func()
}

func (e *env) close() {
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
}

// startLocked runs start on a goroutine locked to its OS thread that lives until the returned stop
// is called: a child started with Pdeathsig is then killed only if this process dies, not when
// the starting thread happens to exit.
func startLocked(start func() error) (stop func(), err error) {
	started := make(chan error, 1)
	stopped := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		started <- start()
		<-stopped
	}()
	if err := <-started; err != nil {
		close(stopped)
		return nil, err
	}
	return func() { close(stopped) }, nil
}

// startPostgres initialises and starts a throwaway cluster in e.dir with fsync and synchronous
// commit on (PostgreSQL's defaults) and pg_stat_statements loaded, and creates the database
// "dshd" with that extension.
func (e *env) startPostgres(ctx context.Context) error {
	parent := filepath.Join(e.dir, "pg")
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	c, err := pgcluster.New(filepath.Join(parent, "data"))
	if err != nil {
		return err
	}
	c.Settings = map[string]string{"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on",
		"max_connections": "300", "shared_buffers": "128MB",
		"shared_preload_libraries": "pg_stat_statements", "pg_stat_statements.max": "10000"}
	if err := c.Init(ctx); err != nil {
		return err
	}
	stop, err := startLocked(func() error { return c.Start(ctx) })
	if err != nil {
		return err
	}
	e.closers = append(e.closers, func() { _ = c.Stop(); stop() })
	e.pgDataDir = c.Dir
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE dshd"); err != nil {
		return err
	}
	e.databaseURL = c.URL("dshd")
	db, err := pgx.Connect(ctx, e.databaseURL)
	if err != nil {
		return err
	}
	defer db.Close(ctx)
	if _, err := db.Exec(ctx, "CREATE EXTENSION pg_stat_statements"); err != nil {
		return fmt.Errorf("create extension pg_stat_statements: %w", err)
	}
	return nil
}

// startMock serves the mock model on 127.0.0.1 from this process. It forgets the requests it
// records every second so that a long run does not grow without bound.
func (e *env) startMock(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	e.mock = mockllm.New(mockllm.Config{})
	srv := &http.Server{Handler: e.mock.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				e.mock.Reset()
			}
		}
	}()
	e.mockURL = "http://" + ln.Addr().String()
	e.closers = append(e.closers, func() { close(done); e.mock.Close(); _ = srv.Close() })
	return nil
}

// buildServer builds ./cmd/server into e.dir and returns the binary's path.
func (e *env) buildServer(ctx context.Context) (string, error) {
	bin := filepath.Join(e.dir, "dshd")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/dshd/dshd/cmd/server")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/server: %w", err)
	}
	return bin, nil
}

// startServer runs bin serve as a child process on a free loopback port, configured for the mock
// model, and waits until /readyz answers 200. extraEnv (NAME=value) is added to this process's
// environment, so settings such as DSHD_CPU_PROFILE pass through. A server this env started
// before is stopped first; the tenants and presets it created stay in the database.
func (e *env) startServer(ctx context.Context, bin, logLevel string, extraEnv []string) error {
	if e.stopServer != nil {
		e.stopServer()
		e.stopServer = nil
	} else {
		e.closers = append(e.closers, func() {
			if e.stopServer != nil {
				e.stopServer()
				e.stopServer = nil
			}
		})
	}
	e.serverBin, e.serverLogLevel = bin, logLevel
	port, err := pgcluster.FreePort()
	if err != nil {
		return err
	}
	if e.adminToken == "" {
		e.adminToken = randomToken()
	}
	e.serverURL = "http://127.0.0.1:" + strconv.Itoa(port)
	e.serverLog = filepath.Join(e.dir, "server.log")
	logf, err := os.OpenFile(e.serverLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, "serve")
	cmd.Env = append(os.Environ(),
		"DATABASE_URL="+e.databaseURL,
		"DSHD_ADDR=127.0.0.1:"+strconv.Itoa(port),
		"DSHD_ADMIN_TOKEN="+e.adminToken,
		"DSHD_MODEL_HOSTS="+e.mockURL[len("http://"):],
		"DSHD_DEMO_TOOLS=1",
		// The load is one tenant's: its post rate is not what is measured.
		"DSHD_SESSION_POST_RATE=0", "DSHD_TENANT_POST_RATE=0",
		"DSHD_LOG_LEVEL="+logLevel)
	cmd.Env = append(cmd.Env, extraEnv...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	exited := make(chan struct{})
	stop, err := startLocked(func() error {
		if err := cmd.Start(); err != nil {
			return err
		}
		go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
		return nil
	})
	if err != nil {
		logf.Close()
		return fmt.Errorf("start server: %w", err)
	}
	e.serverPID = cmd.Process.Pid
	e.stopServer = func() {
		// SIGTERM: a graceful shutdown, which also writes a CPU profile when one is configured.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		stop()
	}
	return waitReady(ctx, e.serverURL, exited, e.serverLog)
}

// restartServer starts the server again with the binary and log level of the last start and
// extraEnv.
func (e *env) restartServer(ctx context.Context, extraEnv []string) error {
	return e.startServer(ctx, e.serverBin, e.serverLogLevel, extraEnv)
}

func waitReady(ctx context.Context, base string, exited <-chan struct{}, logPath string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("server exited during start: %s", log)
		case <-ctx.Done():
			return errors.New("server not ready within 60s (log: " + logPath + ")")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
