package pgstore

import (
	"sync"

	"github.com/google/uuid"
)

// inflight counts, per session, this store's commits that are being sent or published (Append,
// Post): a follower woken by the notification of such a commit waits for its publication
// (OnCommit) instead of reading back what its committer is about to hand over (Journal.Wait).
type inflight struct {
	mu sync.Mutex
	m  map[uuid.UUID]*flight
}

type flight struct {
	n    int
	done chan struct{}
}

func (f *inflight) begin(id uuid.UUID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = make(map[uuid.UUID]*flight)
	}
	fl := f.m[id]
	if fl == nil {
		fl = &flight{done: make(chan struct{})}
		f.m[id] = fl
	}
	fl.n++
}

func (f *inflight) end(id uuid.UUID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fl := f.m[id]; fl != nil {
		if fl.n--; fl.n == 0 {
			close(fl.done)
			delete(f.m, id)
		}
	}
}

// settled returns a channel closed once the session has no commit of this store in flight, nil
// when it has none now.
func (f *inflight) settled(id uuid.UUID) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fl := f.m[id]; fl != nil {
		return fl.done
	}
	return nil
}
