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
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dshd/dshd/internal/mockllm"
	"github.com/dshd/dshd/internal/pgcluster"
)

// env is what the self-contained mode starts: a PostgreSQL cluster with normal durability, the
// mock model and the server, each a child process. close stops them in reverse order.
type env struct {
	dir         string
	databaseURL string
	pgDataDir   string
	mockURL     string // base URL of the mock model, http://127.0.0.1:port
	// mockPID is the mock model's process, for its CPU time: the child of the self-contained
	// mode, or -mock-pid; 0 when it is not known or the mock is served from this process
	// (mockInProcess).
	mockPID       int
	mockInProcess bool
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
		"shared_preload_libraries": "pg_stat_statements", "pg_stat_statements.max": "10000",
		"pg_stat_statements.track_planning": "on"}
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

// startMock serves the mock model on addr from this process (-url without -mock-url): this
// process's CPU is then the client's and the mock's together. It forgets the requests it records
// every second so that a long run does not grow without bound.
func (e *env) startMock(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mock := mockllm.New(mockllm.Config{})
	srv := &http.Server{Handler: mock.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	stop := every(time.Second, mock.Reset)
	e.mockURL, e.mockInProcess = "http://"+ln.Addr().String(), true
	e.closers = append(e.closers, func() { stop(); mock.Close(); _ = srv.Close() })
	return nil
}

// startMockProcess runs bin (cmd/mockllm) as a child process on a free loopback port, so that
// its CPU is read from its own pid and this process's is the client's (and, during the
// in-process baselines, the loop's). It waits until the mock answers and asks it every second to
// forget the requests it records (POST /_reset), so that a long run does not grow it without bound.
func (e *env) startMockProcess(ctx context.Context, bin string) error {
	port, err := pgcluster.FreePort()
	if err != nil {
		return err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	logPath := filepath.Join(e.dir, "mockllm.log")
	ch, err := startChild(bin, []string{"-addr", addr}, nil, logPath)
	if err != nil {
		return fmt.Errorf("start mockllm: %w", err)
	}
	e.mockPID, e.mockURL = ch.pid, "http://"+addr
	reset := func() {
		req, err := http.NewRequest(http.MethodPost, e.mockURL+"/_reset", nil)
		if err != nil {
			return
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	stopReset := func() {}
	e.closers = append(e.closers, func() { stopReset(); ch.stop() })
	if err := waitReady(ctx, "mockllm", http.MethodPost, e.mockURL+"/_reset", ch.exited, logPath); err != nil {
		return err
	}
	stopReset = every(time.Second, reset)
	return nil
}

// every calls f every d on a goroutine of its own until the returned stop is called.
func every(d time.Duration, f func()) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				f()
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done) }) }
}

// child is a process started by startChild.
type child struct {
	pid    int
	exited <-chan struct{} // closed when it has exited
	// stop ends it with SIGTERM (SIGKILL after 15 s) and waits for it.
	stop func()
}

// startChild runs bin with args and this process's environment plus extraEnv, its output
// appended to logPath, killed should this process die.
func startChild(bin string, args, extraEnv []string, logPath string) (*child, error) {
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), extraEnv...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	exited := make(chan struct{})
	unlock, err := startLocked(func() error {
		if err := cmd.Start(); err != nil {
			return err
		}
		go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
		return nil
	})
	if err != nil {
		logf.Close()
		return nil, err
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			// SIGTERM: a graceful shutdown, which also writes the server's CPU profile when one
			// is configured.
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(15 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
			unlock()
		})
	}
	return &child{pid: cmd.Process.Pid, exited: exited, stop: stop}, nil
}

// build builds the command ./cmd/<name> of the module into e.dir as out and returns the
// binary's path.
func (e *env) build(ctx context.Context, name, out string) (string, error) {
	bin := filepath.Join(e.dir, out)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/dshd/dshd/cmd/"+name)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/%s: %w", name, err)
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
	env := []string{
		"DATABASE_URL=" + e.databaseURL,
		"DSHD_ADDR=127.0.0.1:" + strconv.Itoa(port),
		"DSHD_ADMIN_TOKEN=" + e.adminToken,
		"DSHD_MODEL_HOSTS=" + e.mockURL[len("http://"):],
		"DSHD_DEMO_TOOLS=1",
		// The load is one tenant's: its post rate is not what is measured.
		"DSHD_SESSION_POST_RATE=0", "DSHD_TENANT_POST_RATE=0",
		"DSHD_LOG_LEVEL=" + logLevel}
	ch, err := startChild(bin, []string{"serve"}, append(env, extraEnv...), e.serverLog)
	if err != nil {
		return fmt.Errorf("start server: %w", err)
	}
	e.serverPID, e.stopServer = ch.pid, ch.stop
	return waitReady(ctx, "server", http.MethodGet, e.serverURL+"/readyz", ch.exited, e.serverLog)
}

// restartServer starts the server again with the binary and log level of the last start and
// extraEnv.
func (e *env) restartServer(ctx context.Context, extraEnv []string) error {
	return e.startServer(ctx, e.serverBin, e.serverLogLevel, extraEnv)
}

// waitReady sends method url until it answers 2xx, the child (name) exits or a minute has passed.
func waitReady(ctx context.Context, name, method, url string, exited <-chan struct{}, logPath string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		req, err := http.NewRequestWithContext(ctx, method, url, nil)
		if err != nil {
			return err
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				return nil
			}
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("%s exited during start: %s", name, log)
		case <-ctx.Done():
			return errors.New(url + " not ready within 60s (log: " + logPath + ")")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
