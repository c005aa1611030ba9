package main

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// dbSample is one reading of PostgreSQL's cumulative statistics: the transactions of the dshd
// database and the WAL of the cluster (pg_stat_wal, PostgreSQL 14 and later).
type dbSample struct {
	commits, rollbacks, inserted int64
	walRecords, walBytes         int64
	walWrites, walSyncs          int64
	ok                           bool
}

// DBPerTurn is what the database did per turn during the HTTP+SSE phase (includes River's and the
// loadgen's own statements). Statistics are flushed by backends about once a second, so short
// runs undercount a little.
type DBPerTurn struct {
	Commits   float64 `json:"commits"`
	Rollbacks float64 `json:"rollbacks"`
	Inserted  float64 `json:"rowsInserted"`
	WALBytes  float64 `json:"walBytes"`
	WALWrites float64 `json:"walWrites"`
	WALSyncs  float64 `json:"walSyncs"` // WAL flushes to disk (fsync or equivalent)
}

func sampleDB(ctx context.Context, conn *pgx.Conn) dbSample {
	var s dbSample
	if conn == nil {
		return s
	}
	_, _ = conn.Exec(ctx, `SELECT pg_stat_clear_snapshot()`)
	err := conn.QueryRow(ctx, `SELECT xact_commit, xact_rollback, tup_inserted FROM pg_stat_database WHERE datname = current_database()`).
		Scan(&s.commits, &s.rollbacks, &s.inserted)
	if err != nil {
		return s
	}
	err = conn.QueryRow(ctx, `SELECT wal_records, wal_bytes::bigint, wal_write, wal_sync FROM pg_stat_wal`).
		Scan(&s.walRecords, &s.walBytes, &s.walWrites, &s.walSyncs)
	s.ok = err == nil
	return s
}

func dbPerTurn(before, after dbSample, turns int) *DBPerTurn {
	if !before.ok || !after.ok || turns == 0 {
		return nil
	}
	n := float64(turns)
	return &DBPerTurn{
		Commits:   float64(after.commits-before.commits) / n,
		Rollbacks: float64(after.rollbacks-before.rollbacks) / n,
		Inserted:  float64(after.inserted-before.inserted) / n,
		WALBytes:  float64(after.walBytes-before.walBytes) / n,
		WALWrites: float64(after.walWrites-before.walWrites) / n,
		WALSyncs:  float64(after.walSyncs-before.walSyncs) / n,
	}
}
