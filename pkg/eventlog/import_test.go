package eventlog_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/dshd/dshd/pkg/eventlog"
	et "github.com/dshd/dshd/pkg/eventlog/eventlogtest"
	"github.com/dshd/dshd/pkg/llm"
)

// TestImportLogKeepsTheReferenceLogs: a reference log is imported as it is, the times it leaves
// out set to the import's.
func TestImportLogKeepsTheReferenceLogs(t *testing.T) {
	t.Parallel()
	for name, ref := range et.ReferenceLogs(t, "testdata") {
		got, err := eventlog.ImportLog(ref, 42)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(got) != len(ref) {
			t.Fatalf("%s: %d events imported of %d", name, len(got), len(ref))
		}
		for i := range ref {
			if got[i].Time != 42 || got[i].Type != ref[i].Type || !bytes.Equal(got[i].Data, ref[i].Data) || ref[i].Time != 0 {
				t.Fatalf("%s: seq %d imported as %+v", name, i, got[i])
			}
		}
	}
}

// TestImportLogRefusesOrRepairs: an open last turn is closed by crash repair's closers, which
// take the last event's time; a parked one, a broken invariant and a splice that does not fit are
// refused at the event that breaks them.
func TestImportLogRefusesOrRepairs(t *testing.T) {
	t.Parallel()
	open := []eventlog.Event{
		ev(0, eventlog.TypeTurnStart, eventlog.TurnStart{Turn: 1}),
		ev(1, eventlog.TypeStepStart, eventlog.StepStart{Turn: 1, Step: 1}),
	}
	got, err := eventlog.ImportLog(open, 42)
	if err != nil || len(got) != 4 || got[2].Type != eventlog.TypeStepEnd || got[3].Type != eventlog.TypeTurnEnd || got[3].Time != open[1].Time {
		t.Fatalf("repaired %+v, %v", got, err)
	}
	parked := append(open[:2:2], ev(2, eventlog.TypeTurnParked, eventlog.TurnParked{Turn: 1, Step: 1, Reason: eventlog.ParkClient,
		Waits: []eventlog.ParkWait{{Kind: eventlog.ParkClient, CallID: "c1", ToolName: "pick"}}}))
	var v *eventlog.ValidationError
	if _, err := eventlog.ImportLog(parked, 42); !errors.As(err, &v) || v.Rule != "E6" || v.Index != 2 {
		t.Fatalf("a parked log: %v", err)
	}
	var inv *eventlog.InvariantError
	unopened := []eventlog.Event{ev(0, eventlog.TypeTurnEnd, eventlog.TurnEnd{Turn: 1, Reason: eventlog.TurnReason{Kind: eventlog.EndCompleted}})}
	if _, err := eventlog.ImportLog(unopened, 42); !errors.As(err, &inv) || inv.Seq != 0 {
		t.Fatalf("a turn/end without its turn: %v", err)
	}
	splices := []eventlog.Event{
		ev(0, eventlog.TypeInboxSpliced, eventlog.Insertion(eventlog.InboxNextTurn, 0, llm.NewUserMessage("u1", "hi"))),
		ev(1, eventlog.TypeInboxSpliced, eventlog.Deletion(eventlog.InboxNextTurn, 2, "")),
	}
	if _, err := eventlog.ImportLog(splices, 42); !errors.As(err, &v) || v.Rule != "LOOP-1" || v.Index != 1 {
		t.Fatalf("a splice that does not fit: %v", err)
	}
	if _, err := eventlog.ImportLog([]eventlog.Event{ev(1, eventlog.TypeTurnStart, eventlog.TurnStart{Turn: 1})}, 42); !errors.As(err, &v) || v.Rule != "SES-1" {
		t.Fatalf("a log that does not start at seq 0: %v", err)
	}
}
