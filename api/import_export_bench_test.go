package api_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/dshd/dshd/api"
)

// benchLog writes a log of turns turns, each a step of eight text deltas of 100 bytes and the
// assistant message citing them: 13 events, about 2.4 KB, a turn.
func benchLog(turns int) []byte {
	var b bytes.Buffer
	seq := 0
	line := func(typ, markers, data string) {
		fmt.Fprintf(&b, `{"type":%q,"seq":%d,"time":1%s,"data":%s}`+"\n", typ, seq, markers, data)
		seq++
	}
	delta := strings.Repeat("x", 100)
	for k := 1; k <= turns; k++ {
		ts := fmt.Sprintf(`"turn":%d,"step":1`, k)
		line("turn/start", "", fmt.Sprintf(`{"turn":%d}`, k))
		line("step/start", "", "{"+ts+"}")
		cites := make([]string, 8)
		for i := range cites {
			cites[i] = fmt.Sprint(seq)
			line("assistant/chunk", "", `{`+ts+`,"chunk":{"type":"text-delta","index":0,"text":"`+delta+`"}}`)
		}
		line("assistant/message", `,"surfaceOp":"append","sourceEventSeqs":[`+strings.Join(cites, ",")+`]`,
			fmt.Sprintf(`{%s,"message":{"id":"a%d","role":"assistant","source":{"kind":"model","provider":"p","model":"m"},"content":[{"type":"text","text":"%s"}]}}`,
				ts, k, strings.Repeat(delta, 8)))
		line("step/end", "", "{"+ts+"}")
		line("turn/end", "", fmt.Sprintf(`{"turn":%d,"reason":{"kind":"completed"}}`, k))
	}
	return b.Bytes()
}

// BenchmarkSessionImport imports a log of 2,000 turns (26,000 events, about 5 MB) per op.
func BenchmarkSessionImport(b *testing.B) {
	body := benchLog(2000)
	e := newEnv(b, func(c *api.Config) { c.MaxBodyBytes = 64 << 20 })
	pid := e.presetCreate(b, e.keyA, minimalPreset).String()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		e.importLog(b, e.keyA, pid, body).want(b, http.StatusCreated)
	}
}

// BenchmarkSessionExport exports a session of 2,000 imported turns (26,001 events) per op.
func BenchmarkSessionExport(b *testing.B) {
	body := benchLog(2000)
	e := newEnv(b, func(c *api.Config) { c.MaxBodyBytes = 64 << 20 })
	pid := e.presetCreate(b, e.keyA, minimalPreset).String()
	var s imported
	e.importLog(b, e.keyA, pid, body).want(b, http.StatusCreated).json(b, &s)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		r := e.do(b, "GET", "/v1/sessions/"+s.ID+"/export", e.keyA, nil).want(b, http.StatusOK)
		if n := bytes.Count(r.body, []byte("\n")); n != 26002 {
			b.Fatalf("export of %d lines", n)
		}
	}
}
