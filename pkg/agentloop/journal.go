package agentloop

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/dshd/dshd/pkg/eventlog"
)

// ErrStale is returned by a BuildFunc (and passed through by Journal.Append) when the batch was
// built from a view of the log that other writers have since moved on: the caller refreshes its
// view and builds again.
var ErrStale = errors.New("agentloop: the session log moved on; refresh and retry")

// Head is what an append sees of the session at the moment it is written, under the session's
// append lock: the seq its first event will get and the current inbox lengths.
type Head struct {
	NextSeq     int64
	NextTurnLen int
	NextStepLen int
}

// BuildFunc builds a batch for the head it is given. It may be called more than once (a store may
// retry a transaction) and must not have side effects beyond its return value.
type BuildFunc func(h Head) ([]eventlog.NewEvent, error)

// Journal is the session log as one session's turn runner writes and reads it.
//
// Append writes the batch build returns in one atomic step, with contiguous seqs starting at
// h.NextSeq, and returns the committed events; nothing is visible to readers before it returns.
// It keeps the inbox lengths of Head up to date from the `agent/inbox/spliced` events it
// appends, and rejects a splice that does not fit them. Implementations backed by a shared store
// fence appends with the runner's lease and fail once the lease is lost.
//
// Since returns the committed events with seq > after, in order.
//
// Latest returns the highest seq known to be committed, cheaply and possibly a little behind
// (a notification in flight); the runner reads the log when it is past its cursor.
//
// A Journal is used by one goroutine at a time, except Latest, which is safe for concurrent use.
type Journal interface {
	Append(ctx context.Context, build BuildFunc) ([]eventlog.Event, error)
	Since(ctx context.Context, after int64) ([]eventlog.Event, error)
	Latest() int64
}

// MemJournal is an in-memory Journal over an eventlog.Log, for tests, benchmarks and embedding
// without PostgreSQL. It is safe for concurrent use: foreign writers (an HTTP handler inserting
// into the inbox) may append while a runner does.
type MemJournal struct {
	mu   sync.Mutex
	log  *eventlog.Log
	lens Head
	// OnAppend, when set, is called with every committed batch, under the journal's lock.
	OnAppend func([]eventlog.Event)
}

// NewMemJournal returns an empty in-memory journal whose events are stamped by now.
func NewMemJournal(now func() time.Time) *MemJournal {
	return &MemJournal{log: eventlog.NewLog(now)}
}

// Append implements Journal.
func (j *MemJournal) Append(_ context.Context, build BuildFunc) ([]eventlog.Event, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	h := j.lens
	h.NextSeq = int64(j.log.Len())
	evs, err := build(h)
	if err != nil {
		return nil, err
	}
	if len(evs) == 0 {
		return nil, nil
	}
	next, err := trackInbox(h, evs)
	if err != nil {
		return nil, err
	}
	out, err := j.log.Append(evs...)
	if err != nil {
		return nil, err
	}
	j.lens = next
	if j.OnAppend != nil {
		j.OnAppend(out)
	}
	return out, nil
}

// Since implements Journal.
func (j *MemJournal) Since(_ context.Context, after int64) ([]eventlog.Event, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	all := j.log.Events()
	if after+1 >= int64(len(all)) {
		return nil, nil
	}
	return all[after+1:], nil
}

// Latest implements Journal.
func (j *MemJournal) Latest() int64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return int64(j.log.Len()) - 1
}

// Events returns a copy of the whole log.
func (j *MemJournal) Events() []eventlog.Event {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.log.Events()
}

// trackInbox returns the inbox lengths after the splices of evs, or an error when one does not fit.
func trackInbox(h Head, evs []eventlog.NewEvent) (Head, error) {
	for _, ne := range evs {
		if ne.Type != eventlog.TypeInboxSpliced {
			continue
		}
		s, err := spliceOf(ne.Data)
		if err != nil {
			return h, err
		}
		n := &h.NextTurnLen
		if s.Target == TargetNextStep {
			n = &h.NextStepLen
		}
		if s.Start < 0 || s.Start+s.Removed() > *n {
			return h, ErrStale
		}
		*n += len(s.Inserted) - s.Removed()
	}
	return h, nil
}

func spliceOf(data any) (Splice, error) {
	switch d := data.(type) {
	case Splice:
		return d, nil
	case *Splice:
		return *d, nil
	}
	b, err := json.Marshal(data)
	if err != nil {
		return Splice{}, err
	}
	var s Splice
	return s, json.Unmarshal(b, &s)
}
