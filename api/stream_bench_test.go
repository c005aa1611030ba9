package api_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dshd/dshd/api"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/google/uuid"
)

// BenchmarkStreamLatency measures commit-to-client latency: from the return of an append (the
// commit is acknowledged) to the moment each of 1,000 SSE subscribers has read the event's
// frame. Each iteration appends one event to one session and waits until every subscriber of
// that session has it. Reported: p50 and p99 over every (event, subscriber) pair, and the time
// until the last subscriber of an event had it.
//
//	go test -run '^$' -bench StreamLatency -benchtime 200x ./api
func BenchmarkStreamLatency(b *testing.B) {
	for _, sessions := range []int{1, 100} {
		b.Run(fmt.Sprintf("subscribers=1000/sessions=%d", sessions), func(b *testing.B) {
			benchStreamLatency(b, 1000, sessions)
		})
	}
}

type benchEvent struct {
	remaining atomic.Int64
	done      chan struct{}
	recv      []int64 // receive times, unix ns, one slot per subscriber of the session
	filled    atomic.Int64
}

func benchStreamLatency(b *testing.B, subscribers, sessions int) {
	e := newEnv(b, func(c *api.Config) { c.MaxStreamsPerSession, c.MaxStreamsPerTenant = subscribers, subscribers })
	ids := make([]uuid.UUID, sessions)
	for i := range ids {
		ids[i] = e.sessionCreate(b, e.keyA)
	}
	perSession := subscribers / sessions
	// events[s][seq] is event seq of session s; allocated before the subscribers start.
	events := make([][]*benchEvent, sessions)
	for s := range events {
		for range b.N/sessions + 1 {
			events[s] = append(events[s], &benchEvent{done: make(chan struct{}), recv: make([]int64, perSession)})
		}
		for _, ev := range events[s] {
			ev.remaining.Store(int64(perSession))
		}
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: subscribers}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); e.api.Close(); wg.Wait() }()
	ready := make(chan struct{}, subscribers)
	for i := range subscribers {
		s := i % sessions
		wg.Go(func() { benchSubscriber(ctx, b, client, streamURL(e.replica, ids[s]), e.keyA, events[s], ready) })
	}
	for range subscribers {
		<-ready
	}
	var commits []int64
	b.ResetTimer()
	for i := range b.N {
		s, seq := i%sessions, i/sessions
		if _, err := e.log.Journal(nil, e.tenantA, ids[s], uuid.Nil).Append(context.Background(), eventlog.Batch(chunk(1, 1, "x"))); err != nil {
			b.Fatal(err)
		}
		commits = append(commits, time.Now().UnixNano())
		<-events[s][seq].done
	}
	b.StopTimer()
	var lat, last []float64
	for i, commit := range commits {
		ev := events[i%sessions][i/sessions]
		worst := 0.0
		for _, r := range ev.recv {
			d := float64(max(r-commit, 0)) / 1e6
			lat = append(lat, d)
			worst = max(worst, d)
		}
		last = append(last, worst)
	}
	slices.Sort(lat)
	slices.Sort(last)
	b.ReportMetric(pct(lat, 0.50), "p50-ms")
	b.ReportMetric(pct(lat, 0.99), "p99-ms")
	b.ReportMetric(pct(last, 0.50), "all-p50-ms")
	b.ReportMetric(pct(last, 0.99), "all-p99-ms")
}

func pct(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}

// benchSubscriber follows one stream and stamps the receive time of each event frame.
func benchSubscriber(ctx context.Context, b *testing.B, client *http.Client, url, key string, events []*benchEvent, ready chan<- struct{}) {
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := client.Do(req)
	if err != nil {
		b.Error(err)
		ready <- struct{}{}
		return
	}
	defer resp.Body.Close()
	ready <- struct{}{}
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		id, ok := strings.CutPrefix(line, "id: ")
		if !ok {
			continue
		}
		now := time.Now().UnixNano()
		seq, _ := strconv.Atoi(strings.TrimSpace(id))
		if seq >= len(events) {
			continue
		}
		ev := events[seq]
		ev.recv[ev.filled.Add(1)-1] = now
		if ev.remaining.Add(-1) == 0 {
			close(ev.done)
		}
	}
}
