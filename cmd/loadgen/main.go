// Command loadgen measures the mission's main path: N concurrent sessions run `steps:20` turns
// over HTTP and SSE (one POST /v1/sessions/{id}/messages with Accept: text/event-stream per turn,
// read until the stream ends with turn/end) against the mock model at zero latency, with every
// event durable in PostgreSQL. In the same run it measures the machine's raw PostgreSQL insert
// ceiling (single-row INSERT commits) and the plain in-process agent loop against the same mock,
// and prints turns/s, turn latency (mean, p50, p99), per-step overhead, events/s, the CPU per turn
// of the server and of PostgreSQL, and the ratio of the HTTP+SSE turn time to the in-process one.
//
// By default it is self-contained: it starts a throwaway PostgreSQL cluster (fsync and
// synchronous_commit on), the mock model in this process and the server as a child process built
// from ./cmd/server, creates a tenant, a preset on the mock and one session per client, and stops
// everything at the end. Run it from the repository root:
//
//	go run ./cmd/loadgen -sessions 1 -duration 20s
//	go run ./cmd/loadgen -sessions 8 -duration 20s
//	go run ./cmd/loadgen -sessions 8 -turns 3000 -json
//
// Settings of the server process pass through the environment, for example a CPU profile:
//
//	DSHD_CPU_PROFILE=/tmp/dshd.pprof go run ./cmd/loadgen -sessions 8 -duration 20s
//	go tool pprof -top /tmp/dshd.pprof
//
// Against a running server (its DSHD_MODEL_HOSTS must allow the mock's address; -mock-url points
// at a running cmd/mockllm, else the mock is served from this process on -mock-addr):
//
//	go run ./cmd/loadgen -url http://127.0.0.1:8080 -key $DSHD_API_KEY -mock-addr 127.0.0.1:8089 \
//	    -server-pid $(pgrep -n dshd) -database-url $DATABASE_URL -sessions 8
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

type options struct {
	sessions         int
	script           string
	duration         time.Duration
	turns            int
	warmup           int
	sessionTurns     int
	baselineDuration time.Duration
	ceilingConns     int
	ceilingDuration  time.Duration
	jsonOut          bool
	serverBin        string
	serverLogLevel   string
	keep             bool

	url, key, adminToken string
	mockURL, mockAddr    string
	serverPID            int
	postmasterPID        int
	databaseURL          string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.IntVar(&o.sessions, "sessions", 1, "concurrent clients, each on its own session")
	fs.StringVar(&o.script, "script", "tools:1 steps:20", "the message of every turn: a mock model script")
	fs.DurationVar(&o.duration, "duration", 20*time.Second, "measured time of the HTTP+SSE load (unless -turns)")
	fs.IntVar(&o.turns, "turns", 0, "measured turns in all; overrides -duration when > 0")
	fs.IntVar(&o.warmup, "warmup", 2, "untimed turns per client before the measurement")
	fs.IntVar(&o.sessionTurns, "session-turns", 1, "turns per session before a client moves to a fresh session (0: never); 1 matches the baseline's fresh log per turn")
	fs.DurationVar(&o.baselineDuration, "baseline-duration", 5*time.Second, "time of each in-process baseline (0: skip)")
	fs.IntVar(&o.ceilingConns, "ceiling-conns", 8, "connections of the PostgreSQL insert ceiling (it is also measured with 1)")
	fs.DurationVar(&o.ceilingDuration, "ceiling-duration", 3*time.Second, "time of each insert ceiling measurement (0: skip)")
	fs.BoolVar(&o.jsonOut, "json", false, "print the report as JSON instead of a table")
	fs.StringVar(&o.serverBin, "server-bin", "", "server binary (default: go build ./cmd/server into a temp dir)")
	fs.StringVar(&o.serverLogLevel, "server-log-level", "warn", "DSHD_LOG_LEVEL of the server process")
	fs.BoolVar(&o.keep, "keep", false, "keep the temp dir (server log, cluster) after the run")
	fs.StringVar(&o.url, "url", "", "target a running server at this base URL instead of starting one")
	fs.StringVar(&o.key, "key", "", "with -url: the tenant's API key")
	fs.StringVar(&o.adminToken, "admin-token", "", "with -url and no -key: create a tenant with this admin token")
	fs.StringVar(&o.mockURL, "mock-url", "", "with -url: base URL of a running mock model (cmd/mockllm)")
	fs.StringVar(&o.mockAddr, "mock-addr", "127.0.0.1:0", "with -url and no -mock-url: serve the mock from this process here")
	fs.IntVar(&o.serverPID, "server-pid", 0, "with -url: pid of the server, for its CPU time")
	fs.IntVar(&o.postmasterPID, "postmaster-pid", 0, "with -url: pid of the PostgreSQL postmaster, for its CPU time")
	fs.StringVar(&o.databaseURL, "database-url", "", "with -url: database for the insert ceiling (a scratch table is created and dropped)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.sessions < 1 || (o.turns <= 0 && o.duration <= 0) {
		return o, errors.New("need -sessions >= 1 and a positive -duration or -turns")
	}
	if o.url != "" && o.key == "" && o.adminToken == "" {
		return o, errors.New("-url needs -key or -admin-token")
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	o, err := parseFlags(args)
	if err != nil {
		return err
	}
	e, err := setup(ctx, o)
	if e != nil {
		defer func() {
			e.close()
			if o.keep {
				fmt.Fprintln(os.Stderr, "loadgen: kept", e.dir)
			} else if e.dir != "" {
				_ = os.RemoveAll(e.dir)
			}
		}()
	}
	if err != nil {
		return err
	}
	rep, err := measure(ctx, o, e)
	if err != nil {
		return err
	}
	if o.jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	rep.print(stdout)
	return nil
}

// setup starts (self-contained) or connects to (-url) the server and the mock model. The env it
// returns is to be closed also when err is not nil.
func setup(ctx context.Context, o options) (*env, error) {
	e := &env{}
	progress("setting up")
	if o.url == "" {
		dir, err := os.MkdirTemp("", "dshd-loadgen-")
		if err != nil {
			return nil, err
		}
		e.dir = dir
		// The postgres user must reach the cluster directory inside.
		if err := os.Chmod(dir, 0o755); err != nil {
			return e, err
		}
		if err := e.startPostgres(ctx); err != nil {
			return e, err
		}
		if e.postmasterPID, err = PostmasterPID(e.pgDataDir); err != nil {
			return e, err
		}
		if err := e.startMock("127.0.0.1:0"); err != nil {
			return e, err
		}
		bin := o.serverBin
		if bin == "" {
			progress("building ./cmd/server")
			if bin, err = e.buildServer(ctx); err != nil {
				return e, err
			}
		}
		if err := e.startServer(ctx, bin, o.serverLogLevel, nil); err != nil {
			return e, err
		}
		return e, nil
	}
	e.serverURL, e.serverPID, e.postmasterPID, e.databaseURL = o.url, o.serverPID, o.postmasterPID, o.databaseURL
	e.adminToken = o.adminToken
	e.mockURL = o.mockURL
	if e.mockURL == "" {
		return e, e.startMock(o.mockAddr)
	}
	return e, nil
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "loadgen: "+format+"\n", args...)
}
