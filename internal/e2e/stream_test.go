package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// follower reads a session's log over SSE from one replica for as long as its context lives.
// It cuts its connection after a random number of events and reconnects with Last-Event-ID
// (and reconnects the same way when a stream drops), so every follower exercises resume.
type follower struct {
	r *replica
	// live, when set, picks the replica of each connection (the chaos test's replicas come and
	// go); a refused connection, a 503 and a 429 then count as drops, and a connection is also
	// cut after a random while, so followers of idle sessions keep resuming.
	live func() *replica
	// lazy makes the timed cuts of a live follower rarer (every 1 to 4 s), for tests with many
	// followers.
	lazy    bool
	key     string
	sid     string
	rng     *rand.Rand
	changed chan struct{} // receives (without blocking the reader) after new events
	done    chan struct{} // closed when the follower has stopped

	mu     sync.Mutex
	events []storedEvent
	conns  int
	err    error // the first malformed frame or out-of-order seq
}

// follow starts a follower; it stops when ctx ends.
func follow(ctx context.Context, r *replica, key, sid string, rng *rand.Rand) *follower {
	return followLive(ctx, r, nil, key, sid, rng)
}

// followLive is follow with live picking each connection's replica (see follower.live).
func followLive(ctx context.Context, r *replica, live func() *replica, key, sid string, rng *rand.Rand) *follower {
	return startFollower(ctx, &follower{r: r, live: live, key: key, sid: sid, rng: rng})
}

// followLazy is followLive with lazy set.
func followLazy(ctx context.Context, live func() *replica, key, sid string, rng *rand.Rand) *follower {
	return startFollower(ctx, &follower{live: live, lazy: true, key: key, sid: sid, rng: rng})
}

func startFollower(ctx context.Context, f *follower) *follower {
	f.changed, f.done = make(chan struct{}, 1), make(chan struct{})
	go func() {
		defer close(f.done)
		for ctx.Err() == nil {
			if err := f.connect(ctx); err != nil {
				f.fail(err)
				return
			}
		}
	}()
	return f
}

// snapshot returns the events received so far and the follower's error.
func (f *follower) snapshot() ([]storedEvent, int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.events[:len(f.events):len(f.events)], f.conns, f.err
}

func (f *follower) fail(err error) {
	f.mu.Lock()
	if f.err == nil {
		f.err = err
	}
	f.mu.Unlock()
	f.notify()
}

func (f *follower) notify() {
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

// connect reads one connection until it is cut, drops or ctx ends. A dropped connection is not
// an error (the caller reconnects after a short pause); a broken frame or seq order is.
func (f *follower) connect(ctx context.Context) error {
	if f.live != nil {
		f.r = f.live()
	}
	evs, _, _ := f.snapshot()
	last := int64(-1)
	if len(evs) > 0 {
		last = evs[len(evs)-1].Seq
	}
	cctx, cut := context.WithCancel(ctx)
	defer cut()
	req, err := http.NewRequestWithContext(cctx, "GET", f.r.url+"/v1/sessions/"+f.sid+"/events", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+f.key)
	req.Header.Set("Accept", "text/event-stream")
	if last >= 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(last, 10))
	}
	f.mu.Lock()
	f.conns++
	f.mu.Unlock()
	resp, err := client.Do(req)
	if err != nil {
		return pause(ctx)
	}
	defer resp.Body.Close()
	if f.live != nil && (resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusTooManyRequests) {
		return pause(ctx)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("stream status %d: %s", resp.StatusCode, body)
	}
	cutAfter := 5 + f.rng.IntN(60)
	if f.live != nil {
		cutAfter = 3 + f.rng.IntN(40)
		after := time.Duration(100+f.rng.IntN(500)) * time.Millisecond
		if f.lazy {
			after = time.Duration(1000+f.rng.IntN(3000)) * time.Millisecond
		}
		timer := time.AfterFunc(after, cut)
		defer timer.Stop()
	}
	err = readFrames(resp.Body, func(id, typ, data string) error {
		ev, err := parseEvent([]byte(data))
		if err != nil {
			return err
		}
		if id != strconv.FormatInt(ev.Seq, 10) || typ != ev.Type {
			return fmt.Errorf("frame id %s event %s carries %s %d", id, typ, ev.Type, ev.Seq)
		}
		if ev.Seq != last+1 {
			return fmt.Errorf("seq %d after %d over the stream (gap or duplicate)", ev.Seq, last)
		}
		last = ev.Seq
		f.mu.Lock()
		f.events = append(f.events, ev)
		f.mu.Unlock()
		f.notify()
		if cutAfter--; cutAfter == 0 {
			cut()
		}
		return nil
	})
	if err != nil && cctx.Err() == nil && err != io.EOF && !isDrop(err) {
		return err
	}
	if cctx.Err() == nil {
		return pause(ctx) // the server ended or dropped the stream
	}
	return nil
}

// isDrop reports whether err is a connection that broke rather than a malformed frame.
func isDrop(err error) bool {
	_, malformed := err.(frameError)
	return !malformed
}

type frameError string

func (e frameError) Error() string { return string(e) }

// readFrames reads SSE frames until the body ends, calling event for each event frame (comments
// are skipped). A frame cut before its blank line is discarded, as the SSE spec says.
func readFrames(body io.Reader, event func(id, typ, data string) error) error {
	br := bufio.NewReaderSize(body, 64<<10)
	var id, typ, data string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if data != "" {
				if err := event(id, typ, data); err != nil {
					return frameError(err.Error())
				}
			}
			id, typ, data = "", "", ""
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id: "):
			id = line[4:]
		case strings.HasPrefix(line, "event: "):
			typ = line[7:]
		case strings.HasPrefix(line, "data: "):
			data += line[6:]
		case strings.HasPrefix(line, "retry: "):
			// A stopping server's reconnection hint (docs/rules.md E6): the follower reconnects
			// when the stream ends, as an EventSource would.
			if _, err := strconv.Atoi(line[7:]); err != nil {
				return frameError(fmt.Sprintf("bad SSE retry line %q", line))
			}
		default:
			return frameError(fmt.Sprintf("unexpected SSE line %q", line))
		}
	}
}

// pause waits briefly before a reconnect; it returns nil (the caller's loop checks ctx).
func pause(ctx context.Context) error {
	select {
	case <-ctx.Done():
	case <-time.After(50 * time.Millisecond):
	}
	return nil
}
