package api

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/telemetry"
)

// captureOut keeps what a stream writes.
type captureOut struct{ buf bytes.Buffer }

func (o *captureOut) write(_ time.Time, frames [][]byte) error {
	for _, f := range frames {
		o.buf.Write(f)
	}
	return nil
}

// countingTranslator writes one frame per event but skips step/end, numbers them, and ends with
// a frame of its own.
type countingTranslator struct{ n int }

func (c *countingTranslator) header(h http.Header) { h.Set("X-Test", "1") }

func (c *countingTranslator) event(buf *bytes.Buffer, ev eventlog.Event) error {
	if ev.Type == eventlog.TypeStepEnd {
		return nil
	}
	c.n++
	fmt.Fprintf(buf, "data: %d %s\n\n", c.n, ev.Type)
	return nil
}

func (c *countingTranslator) end(buf *bytes.Buffer) error {
	buf.WriteString("data: [END]\n\n")
	return nil
}

// TestTranslatedStreamWritesOnlyTheTranslatorsFrames: a stream with a translator writes what the
// translator makes of each event (nothing for some), never the log's frames, carries the
// translator's state across batches, and ends with its end frames after the until event.
func TestTranslatedStreamWritesOnlyTheTranslatorsFrames(t *testing.T) {
	out := &captureOut{}
	st := &sseWriter{out: out, timeout: time.Second, m: telemetry.NewMetrics(prometheus.NewRegistry(), telemetry.Options{}), tr: &countingTranslator{}}
	evs := []eventlog.Event{
		{Seq: 0, Type: eventlog.TypeTurnStart, Data: []byte(`{"turn":1}`)},
		{Seq: 1, Type: eventlog.TypeStepEnd, Data: []byte(`{}`)},
		{Seq: 2, Type: eventlog.TypeAssistantChunk, Data: []byte(`{}`)},
	}
	frames := [][]byte{[]byte("id: 0\n\n"), []byte("id: 1\n\n"), []byte("id: 2\n\n")}
	done, err := st.send(evs, frames, nil, nil)
	if err != nil || done {
		t.Fatalf("send: done %v, %v", done, err)
	}
	until := func(ev eventlog.Event) bool { return ev.Type == eventlog.TypeTurnEnd }
	done, err = st.send([]eventlog.Event{
		{Seq: 3, Type: eventlog.TypeTurnEnd, Data: []byte(`{"turn":1}`)},
		{Seq: 4, Type: eventlog.TypeTurnStart, Data: []byte(`{"turn":2}`)},
	}, nil, nil, until)
	if err != nil || !done {
		t.Fatalf("send: done %v, %v", done, err)
	}
	want := "data: 1 turn/start\n\ndata: 2 assistant/chunk\n\ndata: 3 turn/end\n\ndata: [END]\n\n"
	if got := out.buf.String(); got != want {
		t.Fatalf("wrote\n%q\nwant\n%q", got, want)
	}
}
