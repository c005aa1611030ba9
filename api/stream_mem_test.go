package api_test

import (
	"bufio"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/api"
)

// idleStreamCost opens n SSE streams over raw TCP connections, spread over sessions sessions of
// tenant A (each with a few events, which every stream reads before it goes idle), and returns
// the growth of the process's heap and stacks (runtime.MemStats HeapInuse+StackInuse after GC)
// and of its RSS, per stream. The clients are bare net.Conns without goroutines or buffers, so
// what is measured is the server's cost of an idle subscriber (a client net.Conn is a few hundred
// bytes).
func idleStreamCost(tb testing.TB, e *env, n, sessions int) (heapPer, rssPer float64) {
	tb.Helper()
	ids := make([]uuid.UUID, sessions)
	for i := range ids {
		ids[i] = e.sessionCreate(tb, e.keyA)
		e.appendEvents(ids[i], turnStart(1), stepStart(1, 1), chunk(1, 1, "hello"))
	}
	u, err := url.Parse(e.url)
	if err != nil {
		tb.Fatal(err)
	}
	open := func(sid uuid.UUID) net.Conn {
		c, err := net.Dial("tcp", u.Host)
		if err != nil {
			tb.Fatal(err)
		}
		fmt.Fprintf(c, "GET /v1/sessions/%s/events HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nAccept: text/event-stream\r\n\r\n", sid, u.Host, e.keyA)
		// Read up to the frame of the last event, then never read again.
		br := bufio.NewReaderSize(c, 512)
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		status, err := br.ReadString('\n')
		if err != nil || !strings.Contains(status, " 200 ") {
			tb.Fatalf("stream: %q %v", status, err)
		}
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				tb.Fatalf("stream: %v", err)
			}
			if strings.HasPrefix(line, "id: 2") {
				break
			}
		}
		_ = c.SetReadDeadline(time.Time{})
		return c
	}
	// Warm up: the first streams allocate pools, the tails and the router's caches.
	warm := make([]net.Conn, 0, sessions)
	for _, sid := range ids {
		warm = append(warm, open(sid))
	}
	heap0, rss0 := memNow()
	conns := make([]net.Conn, 0, n)
	for i := range n {
		conns = append(conns, open(ids[i%sessions]))
	}
	// Every stream parks; with the short heartbeat of the callers each has also written a few
	// heartbeats since, as an idle subscriber does.
	time.Sleep(time.Second)
	heap1, rss1 := memNow()
	for _, c := range append(conns, warm...) {
		c.Close()
	}
	return float64(heap1-heap0) / float64(n), float64(rss1-rss0) / float64(n)
}

// idleEnv is an environment whose streams beat every 300 ms and whose caps let n subscribers in.
func idleEnv(tb testing.TB, n int) *env {
	return newEnv(tb, func(c *api.Config) {
		c.Heartbeat = 300 * time.Millisecond
		c.MaxStreamsPerSession, c.MaxStreamsPerTenant = 2*n, 2*n
	})
}

// TestIdleSubscriberMemory: 1,000 idle SSE subscribers cost at most 20 KiB each in
// heap and stacks (runtime.MemStats after GC), on one session or spread over 100. -race inflates
// both, so under it the numbers are only logged.
//
//	go test -run IdleSubscriberMemory -v ./api
func TestIdleSubscriberMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: opens 1,000 streams")
	}
	// Not parallel: other tests' allocations would be measured too.
	const n = 1000
	for _, sessions := range []int{1, 100} {
		t.Run(fmt.Sprintf("sessions=%d", sessions), func(t *testing.T) {
			heap, rss := idleStreamCost(t, idleEnv(t, n), n, sessions)
			t.Logf("%d idle subscribers over %d sessions: %.1f KiB heap+stack, %.1f KiB RSS per subscriber", n, sessions, heap/1024, rss/1024)
			if !raceEnabled && heap > 20<<10 {
				t.Errorf("an idle subscriber costs %.1f KiB of heap and stack, want at most 20 KiB", heap/1024)
			}
		})
	}
}

// BenchmarkIdleSubscriberMemory reports the cost of an idle SSE subscriber among 1,000, in bytes of
// heap and stacks and of RSS (the iterations only repeat the measurement).
//
//	go test -run '^$' -bench IdleSubscriberMemory -benchtime 1x ./api
func BenchmarkIdleSubscriberMemory(b *testing.B) {
	const n = 1000
	for _, sessions := range []int{1, 100} {
		b.Run(fmt.Sprintf("subscribers=%d/sessions=%d", n, sessions), func(b *testing.B) {
			var heap, rss float64
			for range b.N {
				h, r := idleStreamCost(b, idleEnv(b, n), n, sessions)
				heap, rss = heap+h, rss+r
			}
			b.ReportMetric(heap/float64(b.N), "heap-B/subscriber")
			b.ReportMetric(rss/float64(b.N), "rss-B/subscriber")
		})
	}
}
