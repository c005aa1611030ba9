package api_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/r3labs/sse/v2"

	"github.com/dshd/dshd/pkg/eventlog"
)

// noRetry makes the r3labs client return instead of retrying: the test reconnects by itself,
// alternating between replicas.
type noRetry struct{}

func (noRetry) NextBackOff() time.Duration { return -1 }
func (noRetry) Reset()                     {}

// TestStreamResumeAcrossReplicas cuts SSE clients at random points while a writer appends and
// reconnects each to the other of two server instances over the same database with
// Last-Event-ID: every client receives every event exactly once, in order.
func TestStreamResumeAcrossReplicas(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	replicas := []*replica{e.replica, e.newReplica()}
	sid := e.sessionCreate(t, e.keyA)
	const chunks, clients = 300, 8
	total := int64(chunks + 4) // turn/start, step/start, chunks, step/end, turn/end
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	writerErr := make(chan error, 1)
	go func() { writerErr <- writeTurn(ctx, e, sid, chunks, rand.New(rand.NewPCG(seed, 1))) }()

	results := make([][]int64, clients)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			results[c] = followWithCuts(ctx, t, replicas, sid, e.keyA, rand.New(rand.NewPCG(seed, uint64(c)+2)))
		})
	}
	wg.Wait()
	if err := <-writerErr; err != nil {
		t.Fatalf("writer: %v", err)
	}
	for c, got := range results {
		if int64(len(got)) != total {
			t.Errorf("client %d received %d events, want %d", c, len(got), total)
		}
		for i, seq := range got {
			if seq != int64(i) {
				t.Fatalf("client %d: event %d has seq %d (gap, duplicate or disorder)", c, i, seq)
			}
		}
	}
}

// writeTurn appends one turn of chunks in random batches of 1 to 5 events.
func writeTurn(ctx context.Context, e *env, sid uuid.UUID, chunks int, rng *rand.Rand) error {
	evs := []eventlog.NewEvent{turnStart(1), stepStart(1, 1)}
	for i := range chunks {
		evs = append(evs, chunk(1, 1, strconv.Itoa(i)))
	}
	evs = append(evs, stepEnd(1, 1), turnEnd(1))
	for len(evs) > 0 {
		n := min(len(evs), 1+rng.IntN(5))
		if _, err := e.log.Journal(nil, e.tenantA, sid, uuid.Nil).Append(ctx, eventlog.Batch(evs[:n]...)); err != nil {
			return err
		}
		evs = evs[n:]
	}
	return nil
}

// followWithCuts follows the stream until turn/end, cutting the connection after a random
// number of events and reconnecting to the next replica with Last-Event-ID. It returns the seqs
// received, in the order received.
func followWithCuts(ctx context.Context, t *testing.T, replicas []*replica, sid uuid.UUID, key string, rng *rand.Rand) []int64 {
	var got []int64
	last := int64(-1)
	for conn := 0; ctx.Err() == nil && !t.Failed(); conn++ {
		client := sse.NewClient(streamURL(replicas[conn%len(replicas)], sid), sse.ClientMaxBufferSize(1<<20))
		client.Headers["Authorization"] = "Bearer " + key
		client.ReconnectStrategy = noRetry{}
		if last >= 0 {
			client.LastEventID.Store([]byte(strconv.FormatInt(last, 10)))
		}
		connCtx, cut := context.WithCancel(ctx)
		cutAfter, n, terminal := 1+rng.IntN(60), 0, false
		_ = client.SubscribeRawWithContext(connCtx, func(msg *sse.Event) {
			var ev struct {
				Type string
				Seq  int64
			}
			if err := json.Unmarshal(msg.Data, &ev); err != nil {
				// The r3labs reader hands the tail of a cut connection to the handler as if it
				// were an event; per the SSE spec an event without its blank line is discarded.
				if connCtx.Err() == nil {
					t.Errorf("incomplete frame before any cut: %s", msg.Data)
				}
				return
			}
			if strconv.FormatInt(ev.Seq, 10) != string(msg.ID) || ev.Type != string(msg.Event) {
				t.Errorf("frame id %s event %s does not match its data %s", msg.ID, msg.Event, msg.Data)
			}
			got = append(got, ev.Seq)
			last = ev.Seq
			if n++; n >= cutAfter || ev.Type == "turn/end" {
				terminal = terminal || ev.Type == "turn/end"
				cut()
			}
		})
		cut()
		if terminal {
			t.Logf("%d events over %d connections", len(got), conn+1)
			return got
		}
	}
	t.Errorf("client gave up after %d events (%v)", len(got), ctx.Err())
	return got
}
