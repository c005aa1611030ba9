package pgstore_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	et "github.com/dshd/dshd/pkg/eventlog/eventlogtest"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/pgstore"
)

const benchChunk = `{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"hello, world"}}`

// BenchmarkAppend compares journal appends of single events and 10-event batches into 64 sessions
// with plain INSERTs of the same rows into a scratch table without the counter, on the same
// database in the same run. ns/op is per append call (1 or 10 events).
func BenchmarkAppend(b *testing.B) {
	ctx := context.Background()
	st, pool, tenant := newStore(b, pgstore.StoreConfig{})
	sessions := make([]uuid.UUID, 64)
	for i := range sessions {
		sessions[i] = newSession(b, st, tenant).ID
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE scratch_events (LIKE events INCLUDING ALL)`); err != nil {
		b.Fatal(err)
	}
	var next, rawSeq atomic.Int64
	for _, n := range []int{1, 10} {
		batch := slices.Repeat([]eventlog.NewEvent{et.Raw("assistant/chunk", benchChunk)}, n)
		b.Run(fmt.Sprintf("eventlog/batch=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					id := sessions[next.Add(1)%int64(len(sessions))]
					if _, err := appendEvents(st, ctx, tenant, id, batch...); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "events/s")
		})
		b.Run(fmt.Sprintf("rawinsert/batch=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			types, datas := slices.Repeat([]string{"assistant/chunk"}, n), slices.Repeat([]string{benchChunk}, n)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					id := sessions[next.Add(1)%int64(len(sessions))]
					first := rawSeq.Add(int64(n)) - int64(n)
					_, err := pool.Exec(ctx, `INSERT INTO scratch_events (session_id, seq, tenant_id, type, time, data)
						SELECT $1, $2 + u.ord, $3, u.type, $4, u.data::json
						FROM unnest($5::text[], $6::text[]) WITH ORDINALITY AS u(type, data, ord)`,
						id, first, tenant, time.Now().UnixMilli(), types, datas)
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkCommitToWake measures the latency from the start of an append (one event, committed
// on a pool connection) to a subscriber's wake on the Hub, with 1,000 subscribers over 100
// sessions. Each iteration appends to one session and waits for its 10 subscribers.
func BenchmarkCommitToWake(b *testing.B) {
	ctx := context.Background()
	st, pool, tenant := newStore(b, pgstore.StoreConfig{})
	hub := pgstore.NewHub(pool, pgstore.HubConfig{})
	if err := hub.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer hub.Stop()
	const nSessions, perSession = 100, 10
	sessions := make([]uuid.UUID, nSessions)
	woke := make(chan time.Time, nSessions*perSession)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range sessions {
		sessions[i] = newSession(b, st, tenant).ID
		for range perSession {
			wake, cancel := hub.Subscribe(sessions[i])
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer cancel()
				for {
					select {
					case <-stop:
						return
					case <-wake:
						woke <- time.Now()
					}
				}
			}()
		}
	}
	ev := et.Raw("assistant/chunk", benchChunk)
	lat := make([]time.Duration, 0, b.N*perSession)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		if _, err := appendEvents(st, ctx, tenant, sessions[i%nSessions], ev); err != nil {
			b.Fatal(err)
		}
		for range perSession {
			lat = append(lat, (<-woke).Sub(start))
		}
	}
	b.StopTimer()
	close(stop)
	wg.Wait()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
