package agentloop

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/promptasm"
)

// mirror is a turn runner's in-memory view of its session log, folded from committed events in
// seq order: the validated log itself (for the derived history), the inbox, the last turn
// number, the request header and context in force, and the kept runtime-context snapshot.
type mirror struct {
	log      *eventlog.Log
	inbox    Inbox
	lastTurn int
	header   json.RawMessage // the header object of the last request/header
	reqCtx   json.RawMessage // the data of the last request/context
	snap     promptasm.Snapshotter
	// onCancel, set while a turn runs, is called for every `agent/cancel` folded meanwhile.
	onCancel func(CancelData)
	// bytes is the size of the event data folded.
	bytes int
}

func newMirror() *mirror { return &mirror{log: eventlog.NewLog(nil)} }

// cursor is the seq of the last folded event, -1 for an empty log.
func (m *mirror) cursor() int64 { return int64(m.log.Len()) - 1 }

func (m *mirror) list(target string) []llm.Message {
	if target == TargetNextTurn {
		return m.inbox.NextTurn
	}
	return m.inbox.NextStep
}

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
	}
	return nil
}

func (m *mirror) apply(ev eventlog.Event) error {
	switch ev.Type {
	case eventlog.TypeInboxSpliced:
		return m.inbox.ApplyEvent(ev.Data)
	case eventlog.TypeSessionEndSeed:
		// A fork's inbox starts empty: it is rebuilt from the splices after the seed (LOOP-1).
		m.inbox = Inbox{}
	case eventlog.TypeTurnStart:
		var d struct {
			Turn int `json:"turn"`
		}
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return err
		}
		m.lastTurn = d.Turn
	case eventlog.TypeRequestHeader:
		var d struct {
			Header json.RawMessage `json:"header"`
		}
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return err
		}
		m.header = d.Header
	case eventlog.TypeRequestContext:
		m.reqCtx = ev.Data
	case eventlog.TypeUserMessage:
		var msg llm.Message
		if err := json.Unmarshal(ev.Data, &msg); err != nil {
			return err
		}
		if msg.Source.Plugin == promptasm.SnapshotPlugin && msg.Source.Form == promptasm.SnapshotForm {
			m.snap.Keep(msg.Text())
		}
	case TypeCancel:
		if m.onCancel != nil {
			var d CancelData
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				return err
			}
			m.onCancel(d)
		}
	}
	return nil
}

// sameJSON reports whether two JSON encodings produced by this package are equal.
func sameJSON(a, b json.RawMessage) bool { return bytes.Equal(a, b) }
