package eventlog

import (
	"slices"
	"time"

	"github.com/dshd/dshd/pkg/llm"
)

// Log is an in-memory session log that applies the same rules as the Store: the agent loop and
// tests use it to validate and replay logs without PostgreSQL. A Log is not safe for concurrent
// use.
type Log struct {
	events  []Event
	surface SurfaceState
	now     func() time.Time

	derived      []llm.Message // SES-5 cache: messages of the first derivedNodes surface nodes
	derivedNodes int
	derivedGen   int
}

// NewLog returns an empty log whose appends are stamped by now (time.Now when nil).
func NewLog(now func() time.Time) *Log {
	if now == nil {
		now = time.Now
	}
	return &Log{now: now}
}

// LoadLog replays events (a stored log or a seed, seqs contiguous from 0) through validation
// (SES-12) and returns the log. An unknown event type without ignorable refuses the whole log
// (SES-9).
func LoadLog(events []Event) (*Log, error) {
	l := NewLog(nil)
	if err := l.AppendEvents(events...); err != nil {
		return nil, err
	}
	return l, nil
}

// Append validates evs as one batch, stamps them with the current time and the next seqs, and
// appends them all, or none when any is invalid (the error is then a *ValidationError).
func (l *Log) Append(evs ...NewEvent) ([]Event, error) {
	batch := make([]Event, len(evs))
	for i, ne := range evs {
		ev, v := prepare(ne)
		if v != nil {
			v.Index, v.Type = i, ne.Type
			return nil, v
		}
		batch[i] = ev
	}
	Stamp(batch, int64(len(l.events)), l.now().UnixMilli())
	return batch, l.commit(batch)
}

// AppendEvents appends complete events, as read from a store or given as a seed: each must have
// the next seq and passes the same validation as Append. All or nothing.
func (l *Log) AppendEvents(evs ...Event) error {
	batch := make([]Event, len(evs))
	for i, ev := range evs {
		if ev.Seq != int64(len(l.events)+i) {
			return &ValidationError{Index: i, Seq: ev.Seq, Type: ev.Type, Rule: "SES-1",
				Reason: "seq is not contiguous from 0"}
		}
		c, v := normalize(ev)
		if v != nil {
			v.Index, v.Seq, v.Type = i, ev.Seq, ev.Type
			return v
		}
		batch[i] = c
	}
	return l.commit(batch)
}

// AppendCommitted appends events that a store has already validated and committed (a runner's
// mirror of its own log): it checks that seqs continue the log and folds the surface, but does not
// validate the data again. All or nothing.
func (l *Log) AppendCommitted(evs ...Event) error {
	for i, ev := range evs {
		if ev.Seq != int64(len(l.events)+i) {
			return &ValidationError{Index: i, Seq: ev.Seq, Type: ev.Type, Rule: "SES-1",
				Reason: "seq is not contiguous from 0"}
		}
	}
	return l.commit(evs)
}

// normalize re-validates a complete event as lossless JSON and applies the local rules.
func normalize(ev Event) (Event, *ValidationError) {
	data, err := losslessJSON(ev.Data)
	if err != nil {
		return ev, verr("SES-1", "data is not lossless JSON: %v", err)
	}
	ev.Data = data
	return ev, checkLocal(ev)
}

// Stamp sets the seqs of a prepared batch from base, and the time of each event that has none
// (NewEvent.Time) to now.
func Stamp(batch []Event, base, now int64) {
	for i := range batch {
		batch[i].Seq = base + int64(i)
		if batch[i].Time == 0 {
			batch[i].Time = now
		}
	}
}

// commit applies the seq-dependent rules to a stamped batch and appends it.
func (l *Log) commit(batch []Event) error {
	base := int64(len(l.events))
	sf := l.surface
	if HasReplace(batch) {
		sf = l.surface.clone()
	}
	lookup := func(seq int64) (Event, error) {
		if seq < base {
			return l.events[seq], nil
		}
		return batch[seq-base], nil
	}
	if err := CheckBatch(batch, &sf, lookup); err != nil {
		return err
	}
	l.surface = sf
	l.events = append(l.events, batch...)
	return nil
}

func HasReplace(batch []Event) bool {
	for _, ev := range batch {
		if ev.SurfaceOp != nil && ev.SurfaceOp.Replace {
			return true
		}
	}
	return false
}

// validateBatch checks the seq-dependent rules (SES-3, SES-4) of a stamped batch and folds it into
// sf, which may be nil when the batch has no replacement. Surface appends of a failing batch may
// have been folded into sf: callers pass a copy (or truncate) when they need to roll back.
func CheckBatch(batch []Event, sf *SurfaceState, lookup LookupFunc) error {
	for i, ev := range batch {
		v := checkSeq(ev)
		if v == nil && sf != nil {
			if err := sf.apply(ev, lookup); err != nil {
				var ok bool
				if v, ok = err.(*ValidationError); !ok {
					return err
				}
			}
		}
		if v != nil {
			v.Index, v.Seq, v.Type = i, ev.Seq, ev.Type
			return v
		}
	}
	return nil
}

// Events returns a copy of the log's events.
func (l *Log) Events() []Event { return slices.Clone(l.events) }

// Len returns the number of events, which is also the next seq.
func (l *Log) Len() int { return len(l.events) }

// Surface returns the seqs of the current surface nodes in model order.
func (l *Log) Surface() []int64 { return slices.Clone(l.surface.nodes) }

// ReplaceGeneration returns the number of surface replacements folded so far (SES-3).
func (l *Log) ReplaceGeneration() int { return l.surface.gen }

// DeriveMessages returns the model-visible history (SES-5). Messages are cached per surface node
// and rebuilt after a replacement. The slice is the log's cache, its capacity clipped (appending
// to it copies it): read it only.
func (l *Log) DeriveMessages() ([]llm.Message, error) {
	if l.derivedGen != l.surface.gen {
		l.derived, l.derivedNodes, l.derivedGen = nil, 0, l.surface.gen
	}
	for _, seq := range l.surface.nodes[l.derivedNodes:] {
		m, ok, err := deriveMessage(l.events[seq])
		if err != nil {
			return nil, err
		}
		if ok {
			l.derived = append(l.derived, m)
		}
		l.derivedNodes++
	}
	return slices.Clip(l.derived), nil
}

// OpenTurn returns the number of the turn left open at the end of the log, if any.
func (l *Log) OpenTurn() (turn int64, open bool) { return OpenTurn(l.events) }

// Closers returns the SES-14 crash-repair events for the log (nothing for a balanced log); they
// are not appended.
func (l *Log) Closers() []Event { return Closers(l.events) }

// At returns the event with seq, if the log holds it.
func (l *Log) At(seq int64) (Event, bool) {
	if seq < 0 || seq >= int64(len(l.events)) {
		return Event{}, false
	}
	return l.events[seq], true
}

// From returns the events with seq >= seq, in order. The slice is the log's own: read it only,
// and only until the log is appended to again.
func (l *Log) From(seq int64) []Event {
	if seq < 0 {
		seq = 0
	}
	if seq >= int64(len(l.events)) {
		return nil
	}
	return l.events[seq:]
}
