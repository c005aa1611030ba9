package agentloop

import (
	"fmt"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/promptasm"
)

// mirror is a turn runner's in-memory view of its session log, folded from committed events in
// seq order: the validated log itself (for the derived history), the inbox, the last turn
// number, the request header and context in force, and the kept runtime-context snapshot.
type mirror struct {
	log      *eventlog.Log
	inbox    eventlog.Inbox
	lastTurn int
	turnSeq  int64                    // seq of the last turn/start
	header   *eventlog.ModelHeader    // the header of the last request/header
	reqCtx   *eventlog.RequestContext // the data of the last request/context
	snap     promptasm.Snapshotter
	// onCancel, set while a turn runs, is called for every `agent/cancel` folded meanwhile.
	onCancel func(eventlog.AgentCancel)
	// bytes is the size of the event data folded.
	bytes int
	// observe, when set, is told of every folded event (Config.Observe).
	observe func(eventlog.Event)
}

func newMirror() *mirror { return &mirror{log: eventlog.NewLog(nil)} }

// cursor is the seq of the last folded event, -1 for an empty log.
func (m *mirror) cursor() int64 { return int64(m.log.Len()) - 1 }

// fold applies committed events; events at or below the cursor are skipped, a gap is an error.
func (m *mirror) fold(evs []eventlog.Event) error {
	for _, ev := range evs {
		if ev.Seq <= m.cursor() {
			continue
		}
		if err := m.log.AppendCommitted(ev); err != nil {
			return fmt.Errorf("agentloop: fold seq %d: %w", ev.Seq, err)
		}
		m.bytes += len(ev.Data)
		if err := m.apply(ev); err != nil {
			return fmt.Errorf("agentloop: fold seq %d: %w", ev.Seq, err)
		}
		if m.observe != nil {
			m.observe(ev)
		}
	}
	return nil
}

// apply folds one event into the mirror's state. It only reads the payloads (eventlog.View): the
// runner's own events are not decoded again.
func (m *mirror) apply(ev eventlog.Event) error {
	switch ev.Type {
	case eventlog.TypeInboxSpliced:
		return m.inbox.ApplyEvent(ev)
	case eventlog.TypeSessionEndSeed:
		// A fork's inbox starts empty: it is rebuilt from the splices after the seed (LOOP-1).
		m.inbox = eventlog.Inbox{}
	case eventlog.TypeTurnStart:
		d, err := eventlog.View[eventlog.TurnStart](ev)
		if err != nil {
			return err
		}
		m.lastTurn, m.turnSeq = d.Turn, ev.Seq
	case eventlog.TypeRequestHeader:
		d, err := eventlog.View[eventlog.RequestHeader](ev)
		if err != nil {
			return err
		}
		h := d.Header.Canonical()
		m.header = &h
	case eventlog.TypeRequestContext:
		d, err := eventlog.View[eventlog.RequestContext](ev)
		if err != nil {
			return err
		}
		m.reqCtx = &d
	case eventlog.TypeUserMessage:
		d, err := eventlog.View[eventlog.UserMessage](ev)
		if err != nil {
			return err
		}
		if d.Source.Plugin == promptasm.SnapshotPlugin && d.Source.Form == promptasm.SnapshotForm {
			m.snap.Keep(d.Text())
		}
	case eventlog.TypeAgentCancel:
		if m.onCancel != nil {
			d, err := eventlog.View[eventlog.AgentCancel](ev)
			if err != nil {
				return err
			}
			m.onCancel(d)
		}
	}
	return nil
}
