package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/eventlog"
)

// scripts are the messages' contents: model scripts of the mock, from a plain answer to two tool
// steps, some slow enough that a steer lands in the running turn.
var scripts = []string{
	"text",
	"tool:echo",
	"tools:2",
	"tool:echo steps:2",
	"say:hello%20there chunkdelay:5",
	"tool:echo latency:100",
}

// sessionRun is one session of TestTwoReplicasServeEveryMessageOnce: its messages are posted to
// one replica while its log is streamed from the other.
type sessionRun struct {
	id           string
	post, stream *replica
	follower     *follower
	rng          *rand.Rand
	posted       []posted
	modes        []string
	err          error // the first failed post
}

// postAll posts the session's messages with short random gaps: the first a followup, the others
// followup or steer.
func (s *sessionRun) postAll(ctx context.Context, key string, n int) {
	for i := range n {
		mode := "followup"
		if i > 0 && s.rng.IntN(2) == 0 {
			mode = "steer"
		}
		p, err := s.post.postMessage(ctx, key, s.id, scripts[s.rng.IntN(len(scripts))], mode)
		if err != nil {
			s.err = fmt.Errorf("post %d: %w", i, err)
			return
		}
		s.posted, s.modes = append(s.posted, p), append(s.modes, mode)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(s.rng.IntN(150)) * time.Millisecond):
		}
	}
}

// served reports whether evs hold every posted message as a user/message and no open turn.
func (s *sessionRun) served(evs []storedEvent) bool {
	ids := servedIDs(evs)
	for _, p := range s.posted {
		if ids[p.MessageID] == 0 {
			return false
		}
	}
	_, open := eventlog.OpenTurn(plain(evs))
	return !open
}

// awaitServed waits until the follower has streamed every message's service, or ctx ends.
func (s *sessionRun) awaitServed(ctx context.Context) error {
	for {
		evs, _, err := s.follower.snapshot()
		if err != nil {
			return err
		}
		if s.served(evs) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not served: %w; streamed:\n%s", ctx.Err(), describe(evs))
		case <-s.follower.changed:
		}
	}
}

// TestTwoReplicasServeEveryMessageOnce: two server processes over one database; 50 sessions, 3
// messages each (followup and steer), each session's messages posted to one replica while its
// log streams from the other with cuts and Last-Event-ID resumes. Every message is served exactly
// once and without waiting for a lease to expire, every log passes the SES-10 invariants (turns
// never nest), and the streamed events are the stored log, seqs 0..N-1.
func TestTwoReplicasServeEveryMessageOnce(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 2, 10*time.Second)
	const sessions, messages = 50, 3
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	streamCtx, stopStreams := context.WithCancel(ctx)
	defer stopStreams()

	runs := make([]*sessionRun, sessions)
	for i := range runs {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		k := rng.IntN(2)
		s := &sessionRun{id: c.sessionCreate(t), post: c.replicas[k], stream: c.replicas[1-k], rng: rng}
		s.follower = follow(streamCtx, s.stream, c.key, s.id, rand.New(rand.NewPCG(seed, uint64(sessions+i))))
		runs[i] = s
	}
	start := time.Now()
	var wg sync.WaitGroup
	for _, s := range runs {
		wg.Go(func() { s.postAll(ctx, c.key, messages) })
	}
	wg.Wait()
	for _, s := range runs {
		if s.err != nil {
			t.Fatalf("session %s: %v", s.id, s.err)
		}
	}
	for _, s := range runs {
		if err := s.awaitServed(ctx); err != nil {
			t.Fatalf("session %s (modes %v): %v", s.id, s.modes, err)
		}
	}
	t.Logf("%d sessions x %d messages served in %v", sessions, messages, time.Since(start).Round(time.Millisecond))

	var events, conns, steers int
	var slowest time.Duration
	for _, s := range runs {
		stored, streamed, n := s.compare(ctx, t, c.key)
		events, conns = events+len(stored), conns+n
		for _, m := range s.modes {
			if m == "steer" {
				steers++
			}
		}
		if err := checkLog(stored); err != nil {
			t.Errorf("session %s: %v\n%s", s.id, err, describe(stored))
		}
		if err := sameEvents(streamed, stored); err != nil {
			t.Errorf("session %s: the stream is not the log: %v", s.id, err)
		}
		s.checkServedOnce(t, stored)
		wait := s.slowestWait(stored)
		slowest = max(slowest, wait)
		if wait >= c.leaseTTL {
			// A wake that waits a lease TTL waited for a lease expiry instead of its runner.
			t.Errorf("session %s (modes %v): a message waited %v to be served\n%s", s.id, s.modes, wait, describe(stored))
		}
	}
	t.Logf("%d events, %d steers, %d stream connections; the slowest message was entered %v after its post",
		events, steers, conns, slowest)
}

// compare reads the stored log (from the posting replica) and waits until the follower has
// streamed as many events, then returns both and the follower's connection count.
func (s *sessionRun) compare(ctx context.Context, t *testing.T, key string) (stored, streamed []storedEvent, conns int) {
	t.Helper()
	stored, err := s.post.events(ctx, key, s.id)
	if err != nil {
		t.Fatalf("session %s: %v", s.id, err)
	}
	for {
		streamed, conns, err = s.follower.snapshot()
		if err != nil {
			t.Fatalf("session %s: stream: %v", s.id, err)
		}
		if len(streamed) >= len(stored) {
			return stored, streamed, conns
		}
		select {
		case <-ctx.Done():
			t.Fatalf("session %s: streamed %d of %d events", s.id, len(streamed), len(stored))
		case <-s.follower.changed:
		}
	}
}

// checkServedOnce: every posted message is a user/message exactly once, no other message is, and
// every turn completed.
func (s *sessionRun) checkServedOnce(t *testing.T, stored []storedEvent) {
	t.Helper()
	ids := servedIDs(stored)
	for i, p := range s.posted {
		if ids[p.MessageID] != 1 {
			t.Errorf("session %s: message %d (%s, %s) served %d times", s.id, i, s.modes[i], p.MessageID, ids[p.MessageID])
		}
	}
	if len(ids) != len(s.posted) {
		t.Errorf("session %s: %d distinct user messages, %d posted", s.id, len(ids), len(s.posted))
	}
	for _, te := range turnEnds(stored) {
		if te.kind != "completed" {
			t.Errorf("session %s: turn %d ended %q\n%s", s.id, te.turn, te.kind, describe(stored))
		}
	}
}

// slowestWait returns the longest time from a message's post (its splice) to its entry as a
// user/message, by the events' times.
func (s *sessionRun) slowestWait(stored []storedEvent) time.Duration {
	var worst time.Duration
	for _, p := range s.posted {
		if p.Seq < 0 || p.Seq >= int64(len(stored)) {
			continue
		}
		for _, ev := range stored {
			if ev.Type == eventlog.TypeUserMessage && servedIDs([]storedEvent{ev})[p.MessageID] == 1 {
				worst = max(worst, time.Duration(ev.Time-stored[p.Seq].Time)*time.Millisecond)
			}
		}
	}
	return worst
}
