package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/dshd/dshd/pkg/eventlog"
)

// servedIDs counts the `user/message` events of each message id: how often each message was
// served.
func servedIDs(evs []storedEvent) map[string]int {
	out := map[string]int{}
	for _, ev := range evs {
		if ev.Type != eventlog.TypeUserMessage {
			continue
		}
		var m struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(ev.Data, &m) == nil {
			out[m.ID]++
		}
	}
	return out
}

// turnEnd is a `turn/end` event's turn and reason kind.
type turnEnd struct {
	seq  int64
	turn int64
	kind string
}

func turnEnds(evs []storedEvent) []turnEnd {
	var out []turnEnd
	for _, ev := range evs {
		if ev.Type != eventlog.TypeTurnEnd {
			continue
		}
		var d struct {
			Turn   int64 `json:"turn"`
			Reason struct {
				Kind string `json:"kind"`
			} `json:"reason"`
		}
		_ = json.Unmarshal(ev.Data, &d)
		out = append(out, turnEnd{seq: ev.Seq, turn: d.Turn, kind: d.Reason.Kind})
	}
	return out
}

// count returns how many events have type typ.
func count(evs []storedEvent, typ string) int {
	n := 0
	for _, ev := range evs {
		if ev.Type == typ {
			n++
		}
	}
	return n
}

// servingTurn returns the turn whose step entered the message with id as a `user/message`, or 0.
func servingTurn(evs []storedEvent, id string) int64 {
	var turn int64
	for _, ev := range evs {
		switch ev.Type {
		case eventlog.TypeTurnStart:
			var d struct{ Turn int64 }
			_ = json.Unmarshal(ev.Data, &d)
			turn = d.Turn
		case eventlog.TypeUserMessage:
			var m struct{ ID string }
			if json.Unmarshal(ev.Data, &m) == nil && m.ID == id {
				return turn
			}
		}
	}
	return 0
}

// checkLog checks what every finished log must satisfy: seqs 0..N-1 with no gap or duplicate,
// and the SES-10 invariants (among them: turns never nest, so the session never had two open
// turns).
func checkLog(evs []storedEvent) error {
	for i, ev := range evs {
		if ev.Seq != int64(i) {
			return fmt.Errorf("event %d has seq %d (gap or duplicate)", i, ev.Seq)
		}
	}
	return eventlog.CheckInvariants(plain(evs))
}

// sameEvents reports the first difference between two renderings of a log, or nil.
func sameEvents(streamed, stored []storedEvent) error {
	for i := range min(len(streamed), len(stored)) {
		if !bytes.Equal(streamed[i].raw, stored[i].raw) {
			return fmt.Errorf("event %d differs:\n  streamed %s\n  stored   %s", i, streamed[i].raw, stored[i].raw)
		}
	}
	if len(streamed) != len(stored) {
		return fmt.Errorf("%d events streamed, %d stored", len(streamed), len(stored))
	}
	return nil
}
