package pgstore

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Collectors returns the store's Prometheus collectors: the connection pool's statistics
// (pgxpool.Stat) and the wake queue's depth by job state (counted at most every QueueCountTTL).
// Register them on the registry that serves /metrics.
func (s *Store) Collectors() []prometheus.Collector {
	return []prometheus.Collector{&poolCollector{s: s}, &queueCollector{s: s, now: time.Now}}
}

var (
	poolDescs = struct {
		acquired, idle, constructing, total, max       *prometheus.Desc
		acquires, emptyAcquires, canceled, acquireSecs *prometheus.Desc
	}{
		acquired:      prometheus.NewDesc("dshd_pg_pool_acquired_conns", "PostgreSQL connections of the pool in use now.", nil, nil),
		idle:          prometheus.NewDesc("dshd_pg_pool_idle_conns", "Idle PostgreSQL connections of the pool.", nil, nil),
		constructing:  prometheus.NewDesc("dshd_pg_pool_constructing_conns", "PostgreSQL connections of the pool being opened now.", nil, nil),
		total:         prometheus.NewDesc("dshd_pg_pool_total_conns", "PostgreSQL connections of the pool (acquired, idle and being opened).", nil, nil),
		max:           prometheus.NewDesc("dshd_pg_pool_max_conns", "The pool's largest number of PostgreSQL connections.", nil, nil),
		acquires:      prometheus.NewDesc("dshd_pg_pool_acquires_total", "Successful acquisitions of a pool connection.", nil, nil),
		emptyAcquires: prometheus.NewDesc("dshd_pg_pool_empty_acquires_total", "Acquisitions that had to wait for a connection (none was idle).", nil, nil),
		canceled:      prometheus.NewDesc("dshd_pg_pool_canceled_acquires_total", "Acquisitions given up because their context ended.", nil, nil),
		acquireSecs:   prometheus.NewDesc("dshd_pg_pool_acquire_duration_seconds_total", "Total time spent acquiring pool connections.", nil, nil),
	}
	queueJobsDesc = prometheus.NewDesc("dshd_queue_jobs",
		"Wake jobs of the turns queue by state (available, scheduled, retryable, running), in the shared database: every replica reports the same numbers.",
		[]string{"state"}, nil)
)

// poolCollector reports pgxpool.Stat at every scrape.
type poolCollector struct{ s *Store }

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	d := poolDescs
	for _, x := range []*prometheus.Desc{d.acquired, d.idle, d.constructing, d.total, d.max, d.acquires, d.emptyAcquires, d.canceled, d.acquireSecs} {
		ch <- x
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.pool.Stat()
	d := poolDescs
	gauge := func(desc *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v)
	}
	counter := func(desc *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, v)
	}
	gauge(d.acquired, float64(st.AcquiredConns()))
	gauge(d.idle, float64(st.IdleConns()))
	gauge(d.constructing, float64(st.ConstructingConns()))
	gauge(d.total, float64(st.TotalConns()))
	gauge(d.max, float64(st.MaxConns()))
	counter(d.acquires, float64(st.AcquireCount()))
	counter(d.emptyAcquires, float64(st.EmptyAcquireCount()))
	counter(d.canceled, float64(st.CanceledAcquireCount()))
	counter(d.acquireSecs, st.AcquireDuration().Seconds())
}

// queueStates are the job states dshd_queue_jobs reports; each is reported, 0 when it has none.
var queueStates = []string{"available", "scheduled", "retryable", "running"}

// queueTimeout bounds the count query.
const queueTimeout = 2 * time.Second

// QueueCountTTL is how long a count of the turns queue serves the scrapes that follow it.
// /metrics answers anyone who reaches it: without the cache every scrape would run a query on
// river_job and hold one of the pool's few connections for it.
const QueueCountTTL = 5 * time.Second

// queueCollector reports the turns queue's jobs by state: one indexed count query at most every
// QueueCountTTL, whatever the scrape rate, and one at a time (concurrent scrapes wait for the
// query in flight and share its answer). A failed query reports nothing until the next one,
// so a scrape never fails for it.
type queueCollector struct {
	s   *Store
	now func() time.Time // time.Now; tests move it

	mu     sync.Mutex // held across the query: the single flight
	at     time.Time  // when counts were read (zero: never)
	ok     bool       // the last query succeeded
	counts map[string]int64
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) { ch <- queueJobsDesc }

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	counts, ok := c.read()
	if !ok {
		return
	}
	for _, st := range queueStates {
		ch <- prometheus.MustNewConstMetric(queueJobsDesc, prometheus.GaugeValue, float64(counts[st]), st)
	}
}

// read returns the cached counts, counting again when they are older than QueueCountTTL.
func (c *queueCollector) read() (map[string]int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if !c.at.IsZero() && now.Sub(c.at) < QueueCountTTL && now.Sub(c.at) >= 0 {
		return c.counts, c.ok
	}
	c.counts, c.ok = c.s.queueCounts()
	c.at = now
	return c.counts, c.ok
}

// queueCounts counts the turns queue's jobs by state.
func (s *Store) queueCounts() (map[string]int64, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), queueTimeout)
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT state::text, count(*) FROM river_job
		WHERE queue = $1 AND state IN ('available', 'scheduled', 'retryable', 'running') GROUP BY state`, QueueName)
	if err != nil {
		return nil, false
	}
	defer rows.Close()
	counts := map[string]int64{}
	for rows.Next() {
		var state string
		var n int64
		if err := rows.Scan(&state, &n); err != nil {
			return nil, false
		}
		counts[state] = n
	}
	return counts, rows.Err() == nil
}
