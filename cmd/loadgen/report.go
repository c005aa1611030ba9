package main

import (
	"context"
	"fmt"
	"os"
	"time"
)

// Report is everything one run measured.
type Report struct {
	Durability string        `json:"durability"`
	Duration   time.Duration `json:"durationNs"` // measured time of each HTTP+SSE case
	Ceiling1   *Ceiling      `json:"ceiling1,omitempty"`
	CeilingK   *Ceiling      `json:"ceilingK,omitempty"`
	Cases      []Case        `json:"cases"`
	// Idle is what the server and the database do per second with no turn running (River's
	// polling and maintenance). It is part of every case's counters during the measurement; it is
	// subtracted for the time the database then took to settle (see measure).
	Idle       *IdleRate `json:"idlePerSecond,omitempty"`
	CPUProfile string    `json:"cpuProfile,omitempty"` // the server's profile of ProfileCase
	// ProfileCase names the profiled case, TURN@N.
	ProfileCase string `json:"profileCase,omitempty"`
	// GoalsMet of Goals of the cases were met (see evaluate).
	GoalsMet int `json:"goalsMet"`
	Goals    int `json:"goals"`
}

// Case is one turn kind at one concurrency: the HTTP+SSE durable load, each turn a fresh
// session's first, the in-process baselines on the same script at the same concurrency, and the
// warm turns (sessions' second turns).
type Case struct {
	Turn      string     `json:"turn"` // the script of every turn
	Sessions  int        `json:"sessions"`
	HTTP      Phase      `json:"http"`
	InProcess *Phase     `json:"inProcess,omitempty"` // agentloop over the in-memory journal
	Direct    *Phase     `json:"direct,omitempty"`    // model and scheduler, no journal
	CPU       CPUReport  `json:"cpu"`
	DB        *DBPerTurn `json:"dbPerTurn,omitempty"`
	Warm      *Warm      `json:"warm,omitempty"`
	// Statements are the costliest statements of the HTTP+SSE phase in PostgreSQL, per turn.
	Statements []StatementCost `json:"statements,omitempty"`
	// Ratio is the median HTTP+SSE turn time over the median in-process loop turn time;
	// DirectRatio the same over the direct baseline; ThroughputRatio the HTTP+SSE turns/s over
	// the loop's; CPURatio the server's CPU per turn over the loop's (zero when the loop's
	// includes the mock model's).
	Ratio           float64 `json:"ratio,omitempty"`
	DirectRatio     float64 `json:"directRatio,omitempty"`
	ThroughputRatio float64 `json:"turnsPerSecOverLoop,omitempty"`
	CPURatio        float64 `json:"serverCpuOverLoop,omitempty"`
	Goals           []Goal  `json:"goals,omitempty"` // see evaluate
}

// Warm is a case's warm turns: by the same number of clients, each turn the second of a session
// whose first turn (same script, untimed) ran just before.
type Warm struct {
	HTTP Phase     `json:"http"`
	CPU  CPUReport `json:"cpu"`
	// Statements (pg_stat_statements) and WriteXacts (transaction ids) per warm turn, -1 when
	// not available. Both are counted as they happen; commits and WAL flushes are not read, as
	// they would take the database another 10 s to settle per case.
	Statements float64 `json:"statements"`
	WriteXacts float64 `json:"writeXacts"`
	// CPURatio is the server's CPU per first turn (Case.CPU) over its CPU per warm turn;
	// P50Ratio the first turns' p50 over the warm turns'.
	CPURatio float64 `json:"firstOverWarmServerCpu,omitempty"`
	P50Ratio float64 `json:"firstOverWarmP50,omitempty"`
}

// CPUReport is the CPU time used during an HTTP+SSE phase, per turn, split by process. Zero
// means not measured.
type CPUReport struct {
	ServerPerTurn   time.Duration `json:"serverPerTurnNs"`
	PostgresPerTurn time.Duration `json:"postgresPerTurnNs"` // the postmaster and all its processes
	// ClientPerTurn is this process's: the HTTP+SSE clients, and the mock model too when it is
	// served from here (MockInClient: -url without -mock-url).
	ClientPerTurn time.Duration `json:"clientPerTurnNs"`
	MockPerTurn   time.Duration `json:"mockPerTurnNs"` // the mock model's process (zero: its pid is not known)
	MockInClient  bool          `json:"mockInClient,omitempty"`
	MachineBusy   float64       `json:"machineBusy"` // fraction of all cores busy
	Cores         int           `json:"cores"`
}

// cpuSample is one reading of the CPU counters.
type cpuSample struct {
	server, postgres, self, mock time.Duration
	busy, total                  int64
}

func sampleCPU(e *env) cpuSample {
	var s cpuSample
	if e.serverPID > 0 {
		s.server, _ = ProcessCPU(e.serverPID)
	}
	if e.postmasterPID > 0 {
		s.postgres, _ = TreeCPU(e.postmasterPID)
	}
	if e.mockPID > 0 {
		s.mock, _ = ProcessCPU(e.mockPID)
	}
	s.self, _ = ProcessCPU(os.Getpid())
	s.busy, s.total, _ = MachineCPU()
	return s
}

// setupKey returns the tenant's API key: -key, or a new tenant's.
func setupKey(ctx context.Context, o options, e *env) (string, error) {
	if o.key != "" {
		return o.key, nil
	}
	admin := newClient(e.serverURL, "", 1)
	return admin.createTenant(ctx, e.adminToken, fmt.Sprintf("loadgen-%d", time.Now().UnixNano()))
}

func cpuPerTurn(before, after cpuSample, turns int, e *env) CPUReport {
	r := CPUReport{Cores: numCPU()}
	if turns == 0 {
		return r
	}
	per := func(d time.Duration) time.Duration { return d / time.Duration(turns) }
	if e.serverPID > 0 {
		r.ServerPerTurn = per(after.server - before.server)
	}
	if e.postmasterPID > 0 {
		r.PostgresPerTurn = per(after.postgres - before.postgres)
	}
	r.ClientPerTurn = per(after.self - before.self)
	if e.mockPID > 0 {
		r.MockPerTurn = per(after.mock - before.mock)
	}
	r.MockInClient = e.mockInProcess
	if dt := after.total - before.total; dt > 0 {
		r.MachineBusy = float64(after.busy-before.busy) / float64(dt)
	}
	return r
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond)) }
