package cli

import (
	"fmt"
	"io"
	"strings"
	"testing"
)

// BenchmarkTailLines measures what `dshd tail` does per event on its side: read the SSE frame,
// decode the envelope and the payload, write the human line.
func BenchmarkTailLines(b *testing.B) {
	kinds := []string{
		`{"type":"tool/call","seq":%d,"time":1796136933210,"data":{"turn":1,"step":1,"callId":"call_1_1","name":"echo","arguments":"{\"text\":\"step 1 call 1\"}"}}`,
		`{"type":"tool/result","seq":%d,"time":1796136933210,"data":{"turn":1,"step":1,"message":{"id":"8707ac07","role":"user","content":[{"type":"tool-result","toolCallId":"call_1_1","content":[{"type":"text","text":"step 1 call 1"}],"isError":false}],"source":{"kind":"tool","callId":"call_1_1"}}},"surfaceOp":"append","sourceEventSeqs":[16]}`,
		`{"type":"assistant/chunk","seq":%d,"time":1796136933210,"data":{"turn":1,"step":2,"chunk":{"type":"text-delta","index":0,"text":"Done after 1 steps and 2 tool results."}}}`,
		`{"type":"step/start","seq":%d,"time":1796136933208,"data":{"turn":1,"step":1}}`,
	}
	var sb strings.Builder
	const n = 1000
	for i := range n {
		data := fmt.Sprintf(kinds[i%len(kinds)], i)
		fmt.Fprintf(&sb, "id: %d\nevent: x\ndata: %s\n\n", i, data)
	}
	stream := sb.String()
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		rd := newSSEReader(strings.NewReader(stream))
		for {
			ev, err := rd.NextEvent()
			if err != nil {
				break
			}
			_, _ = io.WriteString(io.Discard, Line(ev))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/event")
}
