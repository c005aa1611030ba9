package eventlog

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestEventJSONKeepsDataBytes: an event's JSON form carries its Data byte for byte, with & < >
// as they are (encoding/json would write \u0026 \u003c \u003e), alone or inside a page written
// by an encoder that does not escape HTML (as the API writes), so the events page and the SSE
// stream serve the same bytes for the same event.
func TestEventJSONKeepsDataBytes(t *testing.T) {
	data := `{"text":"a && b < c > d"}`
	ev := Event{Type: TypeUserMessage, Seq: 3, Time: 7, Data: json.RawMessage(data)}
	encode := func(v any) []byte {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	one, err := ev.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	page := encode(map[string]any{"events": []Event{ev}})
	for name, b := range map[string][]byte{"event": one, "page": page} {
		if !strings.Contains(string(b), data) {
			t.Errorf("%s JSON %s does not carry the data %s as it is", name, b, data)
		}
	}
	var back Event
	if err := json.Unmarshal(one, &back); err != nil || string(back.Data) != data {
		t.Fatalf("round trip: %s %v", back.Data, err)
	}
}
