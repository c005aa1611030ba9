package agentloop

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
)

// handle names a staged event. Its seq is known once the event is committed (-1 before).
type handle struct {
	seq int64
	idx int // position of the event in the batch being built, -1 outside a build or when none
}

// Seq returns the committed seq, or -1.
func (h *handle) Seq() int64 { return h.seq }

// staged is an event waiting for the next flush.
type staged struct {
	typ     string
	data    any
	dataFn  func(lens *eventlog.Head) (any, error) // computed at build time, under the append lock
	surface bool
	cites   []*handle
	h       *handle
	fresh   bool  // the batch must be built on an up-to-date view of the log (claims)
	time    int64 // the event's time (epoch ms), 0 for the append's
	// ignorable marks an event of a type the vocabulary may not know (SES-9).
	ignorable bool
	// entered are the user messages an expand entry enters (a claim): the model history counts
	// them while they are pending.
	entered []llm.Message
	size    int
	// expand, when set, replaces the entry by the events it returns at build time (any number,
	// none included). They cannot be cited.
	expand func(lens *eventlog.Head) ([]eventlog.NewEvent, error)
}

// writer stages the events of one turn runner and writes them in batches: a batch is committed
// when something must be durable (a tool body is about to start, an inbox claim, the turn ends)
// or when the coalescing window or size of pending chunk events is reached. Events get their
// seqs, and citations their values, only when the batch is built inside the append.
//
// After every commit the writer folds the committed events, and any events other writers
// appended in between, into the mirror, in seq order. It is owned by the runner's goroutine.
type writer struct {
	j       eventlog.Journal
	m       *mirror
	clock   func() time.Time
	pending []staged
	size    int
	oldest  time.Time
	// flushes counts committed batches (for tests and metrics).
	flushes int
	// built is the number of events of the last build.
	built int
	// flushed, when set, is called after every batch is committed.
	flushed func()
	// staged, when set, is signalled (without blocking) when an event is staged while nothing
	// was pending: the step's flusher then arms its timer (flusher.go).
	staged chan struct{}
}

func newWriter(j eventlog.Journal, m *mirror, clock func() time.Time) *writer {
	return &writer{j: j, m: m, clock: clock}
}

// stage queues an event and returns its handle.
func (w *writer) stage(s staged) *handle {
	s.h = &handle{seq: -1, idx: -1}
	if len(w.pending) == 0 {
		w.oldest = w.clock()
		if w.staged != nil {
			select {
			case w.staged <- struct{}{}:
			default:
			}
		}
	}
	if s.size == 0 {
		s.size = 128
	}
	w.size += s.size
	w.pending = append(w.pending, s)
	return s.h
}

// due reports whether the pending events have waited window or grown past maxBytes.
func (w *writer) due(window time.Duration, maxBytes int) bool {
	return len(w.pending) > 0 && (w.size >= maxBytes || w.clock().Sub(w.oldest) >= window)
}

// untilDue returns how long the oldest pending event may still wait before window has passed
// (zero or less: it is due), and false when nothing is pending.
func (w *writer) untilDue(window time.Duration) (time.Duration, bool) {
	if len(w.pending) == 0 {
		return 0, false
	}
	return w.oldest.Add(window).Sub(w.clock()), true
}

// flush commits every pending event. On eventlog.ErrStale (a claim built on an outdated view) it folds
// what other writers appended and builds again.
func (w *writer) flush(ctx context.Context) error {
	if len(w.pending) == 0 {
		return nil
	}
	// The log is written whatever happens to the turn: a cancel must not leave it half done. A
	// write that hangs is bounded instead.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.timeout())
	defer cancel()
	var evs []eventlog.Event
	var err error
	for attempt := 0; ; attempt++ {
		evs, err = w.j.Append(ctx, w.build)
		if !errors.Is(err, eventlog.ErrStale) || attempt >= 8 {
			break
		}
		if err = w.refresh(ctx); err != nil {
			return err
		}
	}
	if err != nil {
		w.resetIdx()
		return fmt.Errorf("agentloop: append: %w", err)
	}
	if len(evs) != w.built {
		w.resetIdx()
		return fmt.Errorf("agentloop: append committed %d of %d events", len(evs), w.built)
	}
	for _, p := range w.pending {
		if p.h.idx >= 0 {
			p.h.seq = evs[p.h.idx].Seq
		}
	}
	w.resetIdx()
	w.pending, w.size = w.pending[:0], 0
	w.flushes++
	if w.flushed != nil {
		w.flushed()
	}
	if len(evs) == 0 {
		return nil
	}
	if evs[0].Seq == w.m.cursor()+1 {
		return w.m.fold(evs)
	}
	return w.refresh(ctx)
}

// discard drops every pending event: a step whose commit failed leaves nothing staged that a
// later flush could commit.
func (w *writer) discard() {
	w.resetIdx()
	w.pending, w.size = w.pending[:0], 0
}

// writeTimeout bounds one write or read of the log.
const writeTimeout = 30 * time.Second

// retryBounder is the optional part of a journal that retries a write or read for a while when
// its database is unavailable (pgstore's fenced journal), so that a short outage only pauses the
// turn.
type retryBounder interface {
	RetryBound() time.Duration
}

// timeout bounds one write or read of the log: writeTimeout, plus however long the journal
// retries while its database is unavailable.
func (w *writer) timeout() time.Duration {
	if r, ok := w.j.(retryBounder); ok {
		return writeTimeout + r.RetryBound()
	}
	return writeTimeout
}

func (w *writer) resetIdx() {
	for _, p := range w.pending {
		p.h.idx = -1
	}
}

// catchUp folds what other writers appended, if the journal says there is anything.
func (w *writer) catchUp(ctx context.Context) error {
	if w.j.Latest() <= w.m.cursor() {
		return nil
	}
	return w.refresh(ctx)
}

// refresh folds every committed event the mirror has not seen. Like writes, it is not
// cancelled with the turn.
func (w *writer) refresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.timeout())
	defer cancel()
	evs, err := w.j.Since(ctx, w.m.cursor())
	if err != nil {
		return fmt.Errorf("agentloop: read log: %w", err)
	}
	return w.m.fold(evs)
}

// build turns the pending events into a batch for head h. It runs inside the journal's append.
func (w *writer) build(h eventlog.Head) ([]eventlog.NewEvent, error) {
	fresh := h.Next == w.m.cursor()+1
	for _, p := range w.pending {
		p.h.idx = -1
		if p.fresh && !fresh {
			return nil, eventlog.ErrStale
		}
	}
	lens := h
	out := make([]eventlog.NewEvent, 0, len(w.pending))
	for _, s := range w.pending {
		if s.expand != nil {
			evs, err := s.expand(&lens)
			if err != nil {
				return nil, err
			}
			for _, ne := range evs {
				if err := fold(&lens, ne); err != nil {
					return nil, err
				}
			}
			out = append(out, evs...)
			continue
		}
		data := s.data
		if s.dataFn != nil {
			var err error
			if data, err = s.dataFn(&lens); err != nil {
				return nil, err
			}
		}
		ne := eventlog.NewEvent{Type: s.typ, Data: data, Time: s.time, Ignorable: s.ignorable}
		if s.surface {
			ne.SurfaceOp = eventlog.Append
		}
		// An assistant/message always cites its chunks, even none ([]); other events cite only
		// when they have something to cite (SES-3).
		if len(s.cites) > 0 || s.typ == eventlog.TypeAssistantMessage {
			ne.SourceEventSeqs = make([]int64, 0, len(s.cites))
			for _, c := range s.cites {
				switch {
				case c.idx >= 0:
					ne.SourceEventSeqs = append(ne.SourceEventSeqs, h.Next+int64(c.idx))
				case c.seq >= 0:
					ne.SourceEventSeqs = append(ne.SourceEventSeqs, c.seq)
				default:
					return nil, fmt.Errorf("agentloop: %s cites an event that was never written", s.typ)
				}
			}
		}
		if err := fold(&lens, ne); err != nil {
			return nil, err
		}
		s.h.idx = len(out)
		out = append(out, ne)
	}
	w.built = len(out)
	return out, nil
}

// fold moves the inbox lengths of h over a splice being built (LOOP-1): later entries of the same
// batch see them. A splice that does not fit means the view the batch was staged on is outdated.
func fold(h *eventlog.Head, ne eventlog.NewEvent) error {
	s, ok := ne.Data.(eventlog.InboxSpliced)
	if !ok {
		return nil
	}
	lens, err := h.Inbox.Apply(s)
	if err != nil {
		return fmt.Errorf("%w: %w", eventlog.ErrStale, err)
	}
	h.Inbox = lens
	return nil
}
