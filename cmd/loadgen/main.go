// Command loadgen measures the mission's main path: turns over HTTP and SSE (one POST
// /v1/sessions/{id}/messages with Accept: text/event-stream per turn, read until the stream ends
// with turn/end) against the mock model at zero latency, with every event durable in PostgreSQL,
// next to the same turns in process.
//
// A case is a turn kind (-turns: a mock model script, the message of every turn; default text,
// tools:1, tools:16 and steps:20) at a concurrency N (-sessions; default 1 and 8): N clients run
// turns, each a fresh session's first (the sessions are created ahead, untimed), for -duration
// (default 5s). For every case it prints the turn time over HTTP+SSE (p50, p90), the same turns of
// the plain in-process agent loop over an in-memory journal on the same mock at the same
// concurrency, their ratio, the turns/s of both, a plainer baseline (model calls and the tool
// scheduler, no journal), and per durable turn the SQL statements, commits, write transactions
// and WAL flushes of PostgreSQL and the CPU of the server, of PostgreSQL, of the client (loadgen's
// own process) and of the mock model, next to the loop's CPU per turn (loadgen's process while
// the loop runs). Then, after all the cases (-warm, default on), it measures each case's warm
// turns for -warm-duration (default 2s): sessions created and given one untimed turn, then their
// second turns, by N clients; it prints their p50 and CPU per turn and the first turns' over the
// warm turns'. It ends with the machine's raw PostgreSQL insert ceiling (single-row INSERT
// commits) and a markdown summary with the goals of issue 20, each a ratio to the loop's in the
// same run (goals.go): durable p50 <= 4x the loop's for text and tools:1, 2x for tools:16, 1.5x
// for steps:20, at every N; text turns/s at N=8 >= 25% of the loop's; server CPU per turn <= 3x
// the loop's CPU per turn, every case; server CPU of a first turn <= 1.2x that of a warm turn.
//
// By default it is self-contained: it starts a throwaway PostgreSQL cluster (fsync and
// synchronous_commit on, pg_stat_statements loaded), the mock model and the server as child
// processes built from ./cmd/mockllm and ./cmd/server (so that the CPU of each, and of loadgen's
// own clients, is read apart), creates a tenant and a preset on the mock, and stops everything
// at the end. Run it from the repository root:
//
//	go run ./cmd/loadgen
//	go run ./cmd/loadgen -turns steps:20 -sessions 8 -duration 20s
//	go run ./cmd/loadgen -turns text -sessions 1 -count 3000 -json
//	go run ./cmd/loadgen -turns text -sessions 8 -warm=false
//
// -neighbour measures instead a quiet tenant's text turns alone and beside a noisy tenant that keeps
// 12 CPU-bound run_code programs and 12 CPU-bound bash commands going (neighbour.go; the server
// gets a workspace root and the bwrap shell):
//
//	go run ./cmd/loadgen -neighbour -duration 15s
//
// -cpuprofile writes a CPU profile of the server during one case (-profile-case TURN@N, default
// the first case): the server is restarted with DSHD_CPU_PROFILE for that case, warmed up, and
// stopped right after its measurement, so the profile covers its start, a few warm-up turns, the
// pause while the database settles and the measurement:
//
//	go run ./cmd/loadgen -turns text -sessions 1 -cpuprofile /tmp/dshd.pprof
//	go tool pprof -top /tmp/dshd.pprof
//
// Against a running server (its DSHD_MODEL_HOSTS must allow the mock's address; -mock-url points
// at a running cmd/mockllm, whose CPU is read if -mock-pid gives its pid, else the mock is served
// from this process on -mock-addr and its CPU is counted with the client's):
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
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type options struct {
	turnKinds        []string // the scripts of the cases
	sessions         []int    // the concurrencies of the cases
	duration         time.Duration
	count            int
	warmup           int
	baselineDuration time.Duration
	loopBaseline     bool
	directBaseline   bool
	idleDuration     time.Duration
	settle           time.Duration
	ceilingConns     int
	ceilingDuration  time.Duration
	jsonOut          bool
	topStatements    int
	serverBin        string
	mockBin          string
	warm             bool          // -warm: measure the second turns of sessions too
	warmDuration     time.Duration // measured time of each case's warm turns (unless -count)
	serverLogLevel   string
	keep             bool
	cpuProfile       string
	profileCase      string

	url, key, adminToken string
	mockURL, mockAddr    string
	serverPID, mockPID   int
	postmasterPID        int
	databaseURL          string

	neighbour                    bool // -neighbour: the noisy-neighbour measurement (neighbour.go)
	noisyPrograms, noisyCommands int
	noisyCommand                 string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

// defaultTurns are the turn kinds measured by default.
const defaultTurns = "text,tools:1,tools:16,steps:20"

func parseFlags(args []string) (options, error) {
	var o options
	var turns, sessions, baselines string
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.StringVar(&turns, "turns", defaultTurns, "comma-separated turn kinds: mock model scripts, each the message of every turn of its case")
	fs.StringVar(&sessions, "sessions", "1,8", "comma-separated concurrencies: each case runs N clients, a fresh session per turn")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "measured time of the HTTP+SSE load of each case (unless -count)")
	fs.IntVar(&o.count, "count", 0, "measured turns of each case in all; overrides -duration when > 0")
	fs.IntVar(&o.warmup, "warmup", 3, "untimed turns per client before each measurement (at least 1)")
	fs.DurationVar(&o.baselineDuration, "baseline-duration", 0, "time of each in-process baseline of each case (default: -duration, or 1s with -count)")
	fs.StringVar(&baselines, "baselines", "loop,direct", "in-process baselines: loop (agent loop, in-memory journal), direct (no journal); empty: none")
	fs.DurationVar(&o.idleDuration, "idle-duration", 5*time.Second, "time of the idle background measurement, subtracted from the statistics read after a measurement (0: skip)")
	fs.DurationVar(&o.settle, "settle", 10500*time.Millisecond, "quiet time before the database statistics are read: PostgreSQL backends report theirs 10 s after they went idle; shorter makes commits and WAL flushes inexact")
	fs.IntVar(&o.ceilingConns, "ceiling-conns", 8, "connections of the PostgreSQL insert ceiling (it is also measured with 1)")
	fs.DurationVar(&o.ceilingDuration, "ceiling-duration", 3*time.Second, "time of each insert ceiling measurement (0: skip)")
	fs.IntVar(&o.topStatements, "top-statements", 6, "per case, the statements that cost PostgreSQL the most per turn (pg_stat_statements; 0: none)")
	fs.BoolVar(&o.jsonOut, "json", false, "print the report as JSON instead of tables")
	fs.BoolVar(&o.warm, "warm", true, "also measure each case's warm turns: second turns of sessions that had one (after all the cases' first turns)")
	fs.DurationVar(&o.warmDuration, "warm-duration", 2*time.Second, "measured time of each case's warm turns (with -count: that many warm turns instead)")
	fs.StringVar(&o.serverBin, "server-bin", "", "server binary (default: go build ./cmd/server into a temp dir)")
	fs.StringVar(&o.mockBin, "mock-bin", "", "mock model binary (default: go build ./cmd/mockllm into a temp dir)")
	fs.StringVar(&o.serverLogLevel, "server-log-level", "warn", "DSHD_LOG_LEVEL of the server process")
	fs.BoolVar(&o.keep, "keep", false, "keep the temp dir (server log, cluster) after the run")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the server during one case (-profile-case) to this file")
	fs.StringVar(&o.profileCase, "profile-case", "", "with -cpuprofile: the case to profile, TURN@N (default: the first case)")
	fs.StringVar(&o.url, "url", "", "target a running server at this base URL instead of starting one")
	fs.StringVar(&o.key, "key", "", "with -url: the tenant's API key")
	fs.StringVar(&o.adminToken, "admin-token", "", "with -url and no -key: create a tenant with this admin token")
	fs.StringVar(&o.mockURL, "mock-url", "", "with -url: base URL of a running mock model (cmd/mockllm)")
	fs.StringVar(&o.mockAddr, "mock-addr", "127.0.0.1:0", "with -url and no -mock-url: serve the mock from this process here")
	fs.IntVar(&o.serverPID, "server-pid", 0, "with -url: pid of the server, for its CPU time")
	fs.IntVar(&o.mockPID, "mock-pid", 0, "with -mock-url: pid of the mock model, for its CPU time")
	fs.IntVar(&o.postmasterPID, "postmaster-pid", 0, "with -url: pid of the PostgreSQL postmaster, for its CPU time")
	fs.StringVar(&o.databaseURL, "database-url", "", "with -url: database for the statistics and the insert ceiling (a scratch table is created and dropped)")
	fs.BoolVar(&o.neighbour, "neighbour", false, "measure a quiet tenant's text turns (-duration each) alone and beside a noisy tenant's CPU-bound run_code programs and bash commands, instead of the cases")
	fs.IntVar(&o.noisyPrograms, "noisy-programs", 12, "with -neighbour: the noisy tenant's concurrent CPU-bound run_code turns")
	fs.IntVar(&o.noisyCommands, "noisy-commands", 12, "with -neighbour: the noisy tenant's concurrent CPU-bound bash turns")
	fs.StringVar(&o.noisyCommand, "noisy-command", "sha256sum </dev/zero", "with -neighbour: the command of the noisy bash turns (run for up to 20 s)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, t := range strings.Split(turns, ",") {
		if t = normScript(t); t != "" {
			o.turnKinds = append(o.turnKinds, t)
		}
	}
	for _, f := range strings.Split(sessions, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return o, fmt.Errorf("-sessions: %q is not a positive number", f)
		}
		o.sessions = append(o.sessions, n)
	}
	for _, b := range strings.Split(baselines, ",") {
		switch strings.TrimSpace(b) {
		case "loop":
			o.loopBaseline = true
		case "direct":
			o.directBaseline = true
		case "":
		default:
			return o, fmt.Errorf("-baselines: unknown baseline %q (want loop, direct)", b)
		}
	}
	if len(o.turnKinds) == 0 || len(o.sessions) == 0 {
		return o, errors.New("need at least one -turns kind and one -sessions number")
	}
	if o.count <= 0 && o.duration <= 0 {
		return o, errors.New("need a positive -duration or -count")
	}
	if o.warm && o.count <= 0 && o.warmDuration <= 0 {
		return o, errors.New("need a positive -warm-duration, or -warm=false")
	}
	if o.warmup < 1 {
		return o, errors.New("need -warmup >= 1 (its turns size the sessions created ahead)")
	}
	if o.baselineDuration <= 0 {
		o.baselineDuration = o.duration
		if o.count > 0 {
			o.baselineDuration = time.Second
		}
	}
	if o.mockPID != 0 && o.mockURL == "" {
		return o, errors.New("-mock-pid needs -mock-url (without it the mock is served from this process)")
	}
	if o.url != "" && o.key == "" && o.adminToken == "" {
		return o, errors.New("-url needs -key or -admin-token")
	}
	if o.cpuProfile != "" {
		if o.url != "" {
			return o, errors.New("-cpuprofile needs the self-contained server (no -url): set DSHD_CPU_PROFILE on a running server instead")
		}
		abs, err := filepath.Abs(o.cpuProfile)
		if err != nil {
			return o, err
		}
		o.cpuProfile = abs
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
	if o.neighbour {
		rep, err := measureNeighbour(ctx, o, e)
		if err != nil {
			return err
		}
		return emit(stdout, o.jsonOut, rep)
	}
	rep, err := measure(ctx, o, e)
	if err != nil {
		return err
	}
	return emit(stdout, o.jsonOut, rep)
}

// emit writes a report as indented JSON (-json) or as its tables.
func emit(w io.Writer, jsonOut bool, rep interface{ print(io.Writer) }) error {
	if jsonOut {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	rep.print(w)
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
		mockBin := o.mockBin
		if mockBin == "" {
			progress("building ./cmd/mockllm")
			if mockBin, err = e.build(ctx, "mockllm", "mockllm"); err != nil {
				return e, err
			}
		}
		if err := e.startMockProcess(ctx, mockBin); err != nil {
			return e, err
		}
		bin := o.serverBin
		if bin == "" {
			progress("building ./cmd/server")
			if bin, err = e.build(ctx, "server", "dshd"); err != nil {
				return e, err
			}
		}
		var extra []string
		if o.neighbour {
			extra = neighbourEnv(dir)
		}
		if err := e.startServer(ctx, bin, o.serverLogLevel, extra); err != nil {
			return e, err
		}
		return e, nil
	}
	e.serverURL, e.serverPID, e.postmasterPID, e.databaseURL = o.url, o.serverPID, o.postmasterPID, o.databaseURL
	e.adminToken = o.adminToken
	e.mockURL, e.mockPID = o.mockURL, o.mockPID
	if e.mockURL == "" {
		return e, e.startMock(o.mockAddr)
	}
	return e, nil
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "loadgen: "+format+"\n", args...)
}
