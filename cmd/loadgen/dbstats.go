package main

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// dbSample is one reading of PostgreSQL's counters: the cumulative statistics of the dshd
// database's transactions and of the cluster's WAL (pg_stat_wal, PostgreSQL 14 and later), the
// next transaction id, and the statements run in the database (pg_stat_statements, when the
// extension is loaded and created there).
//
// The cumulative statistics are reported by every backend itself: while it is busy at most about
// once a second (at the end of a transaction), and once it is idle only after 10 s
// (PGSTAT_IDLE_INTERVAL) or when it exits. So commits, rows and WAL are exact only when read at
// least 10 s after the last activity (see measure). pg_stat_statements and the transaction ids
// are counted as they happen.
type dbSample struct {
	at                           time.Time
	commits, rollbacks, inserted int64
	walRecords, walBytes         int64
	walWrites, walSyncs          int64
	nextXid                      int64
	statements                   int64
	ok, statementsOK             bool
}

// dbSampler reads dbSamples on its own connection, one statement (one transaction) per sample.
type dbSampler struct {
	conn       *pgx.Conn
	statements bool // pg_stat_statements is there
}

// Every statistics query of loadgen names a pg_stat view or function; none of dshd's does.
const (
	sampleQuery = `SELECT d.xact_commit, d.xact_rollback, d.tup_inserted,
		w.wal_records, w.wal_bytes::bigint, w.wal_write, w.wal_sync,
		pg_snapshot_xmax(pg_current_snapshot())::text::bigint`
	sampleFrom       = ` FROM pg_stat_database d, pg_stat_wal w WHERE d.datname = current_database()`
	statementsColumn = `, (SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND query NOT LIKE '%pg_stat%')`
)

// newDBSampler returns nil when conn is nil.
func newDBSampler(ctx context.Context, conn *pgx.Conn) *dbSampler {
	if conn == nil {
		return nil
	}
	s := &dbSampler{conn: conn}
	var n int64
	s.statements = conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_statements`).Scan(&n) == nil
	return s
}

func (s *dbSampler) sample(ctx context.Context) dbSample {
	out := dbSample{at: time.Now()}
	if s == nil {
		return out
	}
	q := sampleQuery + sampleFrom
	dest := []any{&out.commits, &out.rollbacks, &out.inserted, &out.walRecords, &out.walBytes,
		&out.walWrites, &out.walSyncs, &out.nextXid}
	if s.statements {
		q = sampleQuery + statementsColumn + sampleFrom
		dest = append(dest, &out.statements)
	}
	out.ok = s.conn.QueryRow(ctx, q).Scan(dest...) == nil
	out.statementsOK = out.ok && s.statements
	return out
}

// DBPerTurn is what the database did per turn during the HTTP+SSE phase, River's background work
// included.
type DBPerTurn struct {
	// Statements counts the top-level statements of the database (BEGIN and COMMIT included),
	// from pg_stat_statements; -1 when it is not available. The statistics queries of loadgen
	// itself are left out.
	Statements float64 `json:"statements"`
	// WriteXacts counts the transaction ids assigned: transactions that wrote, committed or not.
	WriteXacts float64 `json:"writeXacts"`
	// Commits (xact_commit) count every transaction, read-only ones too.
	Commits   float64 `json:"commits"`
	Rollbacks float64 `json:"rollbacks"`
	Inserted  float64 `json:"rowsInserted"`
	WALBytes  float64 `json:"walBytes"`
	WALWrites float64 `json:"walWrites"`
	WALSyncs  float64 `json:"walSyncs"` // WAL flushes to disk (fsync or equivalent)
}

// dbPerTurn computes the counters per turn of a measurement that started at before and ended at
// end: statements and transaction ids from before to end, the cumulative statistics from before
// to settled, a sample taken when the database had settled after the measurement, less what the
// idle background did from end to settled (idle may be nil).
func dbPerTurn(before, end, settled dbSample, idle *IdleRate, turns int) *DBPerTurn {
	if !before.ok || !end.ok || !settled.ok || turns == 0 {
		return nil
	}
	n := float64(turns)
	var quiet float64
	if idle != nil {
		quiet = settled.at.Sub(end.at).Seconds()
	}
	lagged := func(a, b int64, idleRate float64) float64 {
		return max(0, float64(b-a)-idleRate*quiet) / n
	}
	var ir IdleRate
	if idle != nil {
		ir = *idle
	}
	statements := -1.0
	if before.statementsOK && end.statementsOK {
		statements = float64(end.statements-before.statements) / n
	}
	return &DBPerTurn{
		Statements: statements,
		WriteXacts: float64(end.nextXid-before.nextXid) / n,
		Commits:    lagged(before.commits, settled.commits, ir.Commits),
		Rollbacks:  lagged(before.rollbacks, settled.rollbacks, ir.Rollbacks),
		Inserted:   lagged(before.inserted, settled.inserted, ir.Inserted),
		WALBytes:   lagged(before.walBytes, settled.walBytes, ir.WALBytes),
		WALWrites:  lagged(before.walWrites, settled.walWrites, ir.WALWrites),
		WALSyncs:   lagged(before.walSyncs, settled.walSyncs, ir.WALSyncs),
	}
}

// IdleRate is the background activity per second of the idle server (River's polling and
// maintenance) and of loadgen's own sampling.
type IdleRate struct {
	Statements  float64 `json:"statements"` // -1: not available
	WriteXacts  float64 `json:"writeXacts"`
	Commits     float64 `json:"commits"`
	Rollbacks   float64 `json:"rollbacks"`
	Inserted    float64 `json:"rowsInserted"`
	WALBytes    float64 `json:"walBytes"`
	WALWrites   float64 `json:"walWrites"`
	WALSyncs    float64 `json:"walSyncs"`
	ServerCPU   float64 `json:"serverCpu"`   // CPU seconds per second
	PostgresCPU float64 `json:"postgresCpu"` // CPU seconds per second
}

// idleRate computes the rates between two samples of an idle server.
func idleRate(db0, db1 dbSample, cpu0, cpu1 cpuSample) *IdleRate {
	sec := db1.at.Sub(db0.at).Seconds()
	if !db0.ok || !db1.ok || sec <= 0 {
		return nil
	}
	rate := func(a, b int64) float64 { return float64(b-a) / sec }
	r := &IdleRate{Statements: -1,
		WriteXacts: rate(db0.nextXid, db1.nextXid), Commits: rate(db0.commits, db1.commits),
		Rollbacks: rate(db0.rollbacks, db1.rollbacks), Inserted: rate(db0.inserted, db1.inserted),
		WALBytes: rate(db0.walBytes, db1.walBytes), WALWrites: rate(db0.walWrites, db1.walWrites),
		WALSyncs:    rate(db0.walSyncs, db1.walSyncs),
		ServerCPU:   (cpu1.server - cpu0.server).Seconds() / sec,
		PostgresCPU: (cpu1.postgres - cpu0.postgres).Seconds() / sec}
	if db0.statementsOK && db1.statementsOK {
		r.Statements = rate(db0.statements, db1.statements)
	}
	return r
}
