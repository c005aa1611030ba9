package api

import (
	"encoding/json"
	"testing"

	"github.com/dshd/dshd/pkg/eventlog"
)

func evs(from, to int64) []eventlog.Event {
	var out []eventlog.Event
	for s := from; s <= to; s++ {
		out = append(out, eventlog.Event{Type: "turn/start", Seq: s, Data: json.RawMessage(`{"turn":1}`)})
	}
	return out
}

// TestTailExtendDropsOverlapsAndRefusesGaps: a batch published in process and the same rows read
// back must not be buffered twice, and a batch past a gap must wait for the read that fills it.
func TestTailExtendDropsOverlapsAndRefusesGaps(t *testing.T) {
	t.Parallel()
	tl := &tail{last: 4, keep: 100, notify: make(chan struct{})}
	if !tl.extend(evs(5, 7)) || tl.last != 7 {
		t.Fatalf("contiguous batch: last %d", tl.last)
	}
	if tl.extend(evs(5, 7)) || len(tl.buf) != 3 {
		t.Fatalf("the same rows again were added: %d buffered", len(tl.buf))
	}
	if !tl.extend(evs(6, 9)) || tl.last != 9 || len(tl.buf) != 5 {
		t.Fatalf("overlapping batch: last %d, %d buffered", tl.last, len(tl.buf))
	}
	if tl.extend(evs(11, 12)) || tl.last != 9 {
		t.Fatalf("a batch past a gap was taken: last %d", tl.last)
	}
	got, frames, ok, _, err := tl.since(6)
	if !ok || err != nil || len(got) != 3 || got[0].Seq != 7 || len(frames) != 3 {
		t.Fatalf("since(6): %d events from %v, ok %v, %v", len(got), got, ok, err)
	}
	for i, ev := range tl.buf {
		if ev.Seq != int64(5+i) {
			t.Fatalf("buffer not contiguous: %v", tl.buf)
		}
	}
}

func TestTailKeepsABoundedNumberOfBytes(t *testing.T) {
	t.Parallel()
	tl := &tail{last: -1, keep: 1000, notify: make(chan struct{})}
	big := make([]byte, 3<<20)
	for i := range big {
		big[i] = 'x'
	}
	data := json.RawMessage(`{"s":"` + string(big) + `"}`)
	for s := int64(0); s < 5; s++ {
		tl.extend([]eventlog.Event{{Type: "turn/start", Seq: s, Data: data}})
	}
	if tl.bytes > tailBytes || len(tl.buf) == 0 || tl.buf[len(tl.buf)-1].Seq != 4 {
		t.Fatalf("%d bytes in %d events, last %d; want at most %d bytes, the newest kept", tl.bytes, len(tl.buf), tl.last, tailBytes)
	}
	sum := 0
	for _, f := range tl.frames {
		sum += len(f)
	}
	if sum != tl.bytes {
		t.Fatalf("byte count %d, frames hold %d", tl.bytes, sum)
	}
}
