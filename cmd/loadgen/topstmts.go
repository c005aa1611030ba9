package main

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
)

// StatementCost is what one statement of dshd cost PostgreSQL per durable turn during a case's
// HTTP+SSE phase (pg_stat_statements, with track_planning on in the self-contained cluster).
type StatementCost struct {
	Query        string  `json:"query"` // its text, whitespace folded, cut at 100 bytes
	CallsPerTurn float64 `json:"callsPerTurn"`
	ExecMsTurn   float64 `json:"execMsPerTurn"`
	PlanMsTurn   float64 `json:"planMsPerTurn"`
}

// stmtStats is a pg_stat_statements reading: per queryid, its calls and times.
type stmtStats map[int64]stmtStat

type stmtStat struct {
	query          string
	calls          int64
	execMs, planMs float64
}

// readStatements reads pg_stat_statements of the database (nil when it is not there); loadgen's
// own statistics queries are left out.
func (s *dbSampler) readStatements(ctx context.Context) stmtStats {
	if s == nil || !s.statements {
		return nil
	}
	rows, err := s.conn.Query(ctx, `SELECT queryid, query, calls, total_exec_time, total_plan_time
		FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND query NOT LIKE '%pg_stat%'`)
	if err != nil {
		return nil
	}
	defer rows.Close()
	out := stmtStats{}
	for rows.Next() {
		var id int64
		var st stmtStat
		if rows.Scan(&id, &st.query, &st.calls, &st.execMs, &st.planMs) == nil {
			out[id] = st
		}
	}
	return out
}

var spaces = regexp.MustCompile(`\s+`)

// topStatements returns the n statements that cost the most (execution and planning) between
// two readings, per turn.
func topStatements(before, after stmtStats, turns, n int) []StatementCost {
	if after == nil || turns <= 0 || n <= 0 {
		return nil
	}
	var out []StatementCost
	for id, a := range after {
		b := before[id]
		calls := a.calls - b.calls
		if calls <= 0 {
			continue
		}
		q := strings.TrimSpace(spaces.ReplaceAllString(a.query, " "))
		if len(q) > 100 {
			q = q[:100]
		}
		out = append(out, StatementCost{Query: q, CallsPerTurn: float64(calls) / float64(turns),
			ExecMsTurn: (a.execMs - b.execMs) / float64(turns), PlanMsTurn: (a.planMs - b.planMs) / float64(turns)})
	}
	slices.SortFunc(out, func(x, y StatementCost) int {
		tx, ty := x.ExecMsTurn+x.PlanMsTurn, y.ExecMsTurn+y.PlanMsTurn
		switch {
		case tx > ty:
			return -1
		case tx < ty:
			return 1
		}
		return strings.Compare(x.Query, y.Query)
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// printStatements writes each case's costliest statements.
func printStatements(w io.Writer, cases []Case) {
	shown := false
	for _, c := range cases {
		if len(c.Statements) == 0 {
			continue
		}
		if !shown {
			fmt.Fprintln(w, "\nPostgreSQL per durable first turn, the costliest statements (pg_stat_statements: calls, execution and planning ms):")
			shown = true
		}
		fmt.Fprintf(w, "  %s x%d\n", c.Turn, c.Sessions)
		for _, s := range c.Statements {
			fmt.Fprintf(w, "    %5.2f calls %6.3f exec %6.3f plan  %s\n", s.CallsPerTurn, s.ExecMsTurn, s.PlanMsTurn, s.Query)
		}
	}
}
