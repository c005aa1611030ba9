package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// The noisy-neighbour measurement (-neighbour): a quiet tenant's text turns, one client, first
// alone and then while a noisy tenant keeps -noisy-programs CPU-bound run_code programs and
// -noisy-commands CPU-bound bash commands asked for (each noisy client runs one such turn after
// another, each on a fresh session). The self-contained server then has a workspace root and the
// bwrap shell. It reports the quiet tenant's median and p90 alone and beside the noise (goal:
// the median within 2x).

// Noisy turns: the scripted model calls the tool once with these arguments, then answers.
const noisyProgram = `tool:run_code args:{"code":"for(;;){}","description":"Spin"}`

// noisyCommand is the script of a bash turn running command (-noisy-command, default a
// CPU-bound sha256sum of /dev/zero) for up to 20 s; the arguments are URL-encoded, as a script
// value cannot hold a space.
func noisyCommand(command string) string {
	args, _ := json.Marshal(map[string]any{"command": command, "description": "Spin", "timeoutMs": 20000})
	return "tool:bash args:" + url.PathEscape(string(args))
}

// NeighbourReport is the result of -neighbour.
type NeighbourReport struct {
	Alone          Phase `json:"alone"`
	Beside         Phase `json:"beside"`
	NoisyPrograms  int   `json:"noisyPrograms"`
	NoisyCommands  int   `json:"noisyCommands"`
	NoisyTurnsDone int64 `json:"noisyTurnsDone"`
	NoisyErrors    int64 `json:"noisyErrors"`
}

// neighbourEnv is the server environment of -neighbour: workspaces under e.dir, bwrap.
func neighbourEnv(dir string) []string {
	return []string{"DSHD_WORKSPACE_ROOT=" + filepath.Join(dir, "workspaces"), "DSHD_SHELL=bwrap"}
}

func measureNeighbour(ctx context.Context, o options, e *env) (*NeighbourReport, error) {
	admin := newClient(e.serverURL, "", 1)
	quietKey, err := admin.createTenant(ctx, e.adminToken, fmt.Sprintf("quiet-%d", time.Now().UnixNano()))
	if err != nil {
		return nil, err
	}
	noisyKey, err := admin.createTenant(ctx, e.adminToken, fmt.Sprintf("noisy-%d", time.Now().UnixNano()))
	if err != nil {
		return nil, err
	}
	quiet := newClient(e.serverURL, quietKey, 1)
	quietPreset, err := quiet.createPreset(ctx, e.mockURL)
	if err != nil {
		return nil, err
	}
	n := o.noisyPrograms + o.noisyCommands
	noisy := newClient(e.serverURL, noisyKey, n)
	noisyPreset, err := noisy.createPresetMode(ctx, e.mockURL, "both")
	if err != nil {
		return nil, err
	}
	cfg := loadConfig{Client: quiet, PresetID: quietPreset, Script: "text", Sessions: 1, Duration: o.duration, Warmup: o.warmup}
	rep := &NeighbourReport{NoisyPrograms: o.noisyPrograms, NoisyCommands: o.noisyCommands}
	progress("quiet tenant alone: %v", o.duration)
	if rep.Alone, err = quietPhase(ctx, cfg); err != nil {
		return nil, err
	}
	noiseCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var done, failed atomic.Int64
	started := make(chan struct{}, n)
	for i := range n {
		script := noisyProgram
		if i >= o.noisyPrograms {
			script = noisyCommand(o.noisyCommand)
		}
		wg.Go(func() { noisyClient(noiseCtx, noisy, noisyPreset, script, started, &done, &failed) })
	}
	for range n {
		<-started // every noisy client has posted its first turn
	}
	progress("quiet tenant beside %d programs and %d commands: %v", o.noisyPrograms, o.noisyCommands, o.duration)
	rep.Beside, err = quietPhase(ctx, cfg)
	stop()
	wg.Wait()
	rep.NoisyTurnsDone, rep.NoisyErrors = done.Load(), failed.Load()
	return rep, err
}

// quietPhase warms up and measures the quiet tenant's turns.
func quietPhase(ctx context.Context, cfg loadConfig) (Phase, error) {
	pool, err := prepareLoad(ctx, cfg)
	if err != nil {
		return Phase{}, err
	}
	return runLoad(ctx, cfg, pool)
}

// noisyClient runs script turns, each on a fresh session, until ctx ends; it signals started
// once its first turn is about to be posted.
func noisyClient(ctx context.Context, c *client, presetID, script string, started chan<- struct{}, done, failed *atomic.Int64) {
	first := true
	for ctx.Err() == nil {
		id, err := c.createSession(ctx, presetID)
		if err == nil {
			if first {
				started <- struct{}{}
				first = false
			}
			_, err = c.turn(ctx, id, script)
		}
		switch {
		case ctx.Err() != nil:
		case err != nil:
			failed.Add(1)
		default:
			done.Add(1)
		}
	}
	if first {
		started <- struct{}{}
	}
}

func (r *NeighbourReport) print(w io.Writer) {
	ratio := 0.0
	if r.Alone.Latency.P50 > 0 {
		ratio = float64(r.Beside.Latency.P50) / float64(r.Alone.Latency.P50)
	}
	fmt.Fprintf(w, "| quiet tenant's text turns | turns | p50 ms | p90 ms |\n|---|---:|---:|---:|\n")
	fmt.Fprintf(w, "| alone | %d | %s | %s |\n", r.Alone.Turns, msf(r.Alone.Latency.P50), msf(r.Alone.Latency.P90))
	fmt.Fprintf(w, "| beside %d programs + %d commands | %d | %s | %s |\n", r.NoisyPrograms, r.NoisyCommands,
		r.Beside.Turns, msf(r.Beside.Latency.P50), msf(r.Beside.Latency.P90))
	fmt.Fprintf(w, "\nmedian beside / alone: %.2fx (goal: at most 2x); noisy turns completed meanwhile: %d, failed: %d\n",
		ratio, r.NoisyTurnsDone, r.NoisyErrors)
}
