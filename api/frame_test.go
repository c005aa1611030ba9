package api

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/dshd/dshd/pkg/eventlog"
)

// TestFrameFastPathMatchesEncodingJSON checks that the directly written SSE frames carry the same
// event as encoding/json would, for every event of the reference logs and for the optional fields.
func TestFrameFastPathMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	var evs []eventlog.Event
	for _, name := range []string{"text", "tools-4", "code-mode"} {
		raw, err := os.ReadFile("../pkg/eventlog/testdata/" + name + ".jsonl")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			var ev eventlog.Event
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatal(err)
			}
			evs = append(evs, ev)
		}
	}
	evs = append(evs,
		eventlog.Event{Type: "tool/result", Seq: 9, Time: 1, Data: json.RawMessage(`{"a":"<&>\u2028é"}`),
			SurfaceOp: eventlog.ReplaceOp(2, 5), SourceEventSeqs: []int64{}},
		eventlog.Event{Type: "agent/cancel", Seq: 10, Time: 2, Data: json.RawMessage(`{}`), Ignorable: true},
		eventlog.Event{Type: "turn/start", Seq: 11, Time: 3, Data: json.RawMessage("{\n\"turn\": 1}")},
	)
	for _, ev := range evs {
		var fast, slow bytes.Buffer
		if err := appendFrame(&fast, ev); err != nil {
			t.Fatal(err)
		}
		if err := appendFrameSlow(&slow, ev); err != nil {
			t.Fatal(err)
		}
		if got, want := decodeFrame(t, fast.String()), decodeFrame(t, slow.String()); got != want {
			t.Fatalf("seq %d:\nfast %s\nslow %s", ev.Seq, fast.String(), slow.String())
		}
	}
}

// decodeFrame parses one frame and returns its id, event and the event re-encoded canonically.
func decodeFrame(t *testing.T, frame string) string {
	t.Helper()
	var id, typ, data string
	for _, line := range strings.Split(strings.TrimSuffix(frame, "\n\n"), "\n") {
		switch {
		case strings.HasPrefix(line, "id: "):
			id = line[4:]
		case strings.HasPrefix(line, "event: "):
			typ = line[7:]
		case strings.HasPrefix(line, "data: "):
			data += line[6:]
		default:
			t.Fatalf("bad frame line %q in %q", line, frame)
		}
	}
	var v any
	if err := json.Unmarshal([]byte(data), &v); err != nil {
		t.Fatalf("frame data %q: %v", data, err)
	}
	canon, _ := json.Marshal(v)
	return id + "|" + typ + "|" + string(canon)
}
