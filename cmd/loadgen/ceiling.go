package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// Ceiling is the raw insert rate of the database: conns connections each committing single-row
// INSERTs (autocommit: one transaction, one WAL flush per row) into a scratch table.
type Ceiling struct {
	Conns      int           `json:"conns"`
	Commits    int64         `json:"commits"`
	Elapsed    time.Duration `json:"elapsedNs"`
	PerSecond  float64       `json:"commitsPerSecond"`
	MeanCommit time.Duration `json:"meanCommitNs"` // per connection: Elapsed*Conns/Commits
}

// ceilingTable is created for the measurement and dropped after it.
const ceilingTable = "loadgen_ceiling"

// measureCeiling runs the insert ceiling for d with conns connections on databaseURL.
func measureCeiling(ctx context.Context, databaseURL string, conns int, d time.Duration) (Ceiling, error) {
	admin, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return Ceiling{}, err
	}
	defer admin.Close(ctx)
	// Shaped like an event row: a key, a small JSON document, a timestamp.
	if _, err := admin.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+ceilingTable+` (
		id bigserial PRIMARY KEY, conn int NOT NULL, data jsonb NOT NULL, at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return Ceiling{}, fmt.Errorf("ceiling: create table: %w", err)
	}
	defer func() { _, _ = admin.Exec(context.WithoutCancel(ctx), `DROP TABLE IF EXISTS `+ceilingTable) }()

	cs := make([]*pgx.Conn, conns)
	for i := range cs {
		if cs[i], err = pgx.Connect(ctx, databaseURL); err != nil {
			return Ceiling{}, err
		}
		defer cs[i].Close(context.WithoutCancel(ctx))
	}
	data := `{"text":"` + strings.Repeat("x", 160) + `"}`
	var commits atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) && ctx.Err() == nil {
				if _, err := c.Exec(ctx, `INSERT INTO `+ceilingTable+` (conn, data) VALUES ($1, $2)`, i, data); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				commits.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return Ceiling{}, fmt.Errorf("ceiling: insert: %w", firstErr)
	}
	n := commits.Load()
	out := Ceiling{Conns: conns, Commits: n, Elapsed: elapsed, PerSecond: float64(n) / elapsed.Seconds()}
	if n > 0 {
		out.MeanCommit = elapsed * time.Duration(conns) / time.Duration(n)
	}
	return out, nil
}
