package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/dshd/dshd/internal/pgtest"
	"github.com/dshd/dshd/pkg/eventlog"
)

// otlpReceiver is an OTLP/HTTP trace receiver: it accepts POST /v1/traces with a protobuf
// ExportTraceServiceRequest, as a collector does, and keeps the spans.
type otlpReceiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	spans []*tracepb.Span
	bad   []string // requests it could not take
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	rc := &otlpReceiver{}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &req)
		}
		rc.mu.Lock()
		defer rc.mu.Unlock()
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || err != nil {
			rc.bad = append(rc.bad, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type")+" "+errString(err))
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				rc.spans = append(rc.spans, ss.Spans...)
			}
		}
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// lockedBuffer is a log sink for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines() []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(l.b.Bytes()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// spanTree indexes received spans.
type spanTree struct {
	spans    []*tracepb.Span
	children map[string][]*tracepb.Span // by parent span id (hex)
}

func newSpanTree(spans []*tracepb.Span) spanTree {
	st := spanTree{spans: spans, children: map[string][]*tracepb.Span{}}
	for _, s := range spans {
		p := hex.EncodeToString(s.ParentSpanId)
		st.children[p] = append(st.children[p], s)
	}
	return st
}

func (st spanTree) kids(s *tracepb.Span, name string) []*tracepb.Span {
	var out []*tracepb.Span
	for _, c := range st.children[hex.EncodeToString(s.SpanId)] {
		if c.Name == name {
			out = append(out, c)
		}
	}
	return out
}

func attr(s *tracepb.Span, key string) *commonpb.AnyValue {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value
		}
	}
	return nil
}

func attrString(s *tracepb.Span, key string) string {
	if v := attr(s, key); v != nil {
		return v.GetStringValue()
	}
	return ""
}

func attrInt(s *tracepb.Span, key string) (int64, bool) {
	v := attr(s, key)
	if v == nil {
		return 0, false
	}
	i, ok := v.Value.(*commonpb.AnyValue_IntValue)
	if !ok {
		return 0, false
	}
	return i.IntValue, true
}

// TestTraceOfToolTurns runs the program with tracing pointed at an in-test OTLP receiver (the
// real exporter, over HTTP) and checks the span tree of a tool turn and of a run_code turn:
// turn > step > chat and execute_tool, run_code's sub-calls under its execute_tool span; the
// session, tenant and seq range on the turn span; the turn's traceId, on the ignorable turn/trace
// right after its turn/start (which keeps the reference's shape, without one), and the worker's
// log lines carrying the same trace id (docs/observability.md).
func TestTraceOfToolTurns(t *testing.T) {
	t.Parallel()
	rc := newOTLPReceiver(t)
	logs := &lockedBuffer{}
	m := NewMain()
	m.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	m.Config.DatabaseURL = pgtest.URL(t)
	m.Config.Addr = "127.0.0.1:0"
	m.Config.AdminToken = "admin"
	m.Config.DemoTools = true
	m.Config.TracesURL = rc.srv.URL + "/v1/traces"
	if err := m.Run(context.Background()); err != nil {
		m.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })

	c, tenantID := newObsTenant(t, m)
	sid := c.session(map[string]any{"name": "both", "tools": map[string]any{"mode": "both"},
		"model": map[string]any{"provider": "scripted", "model": "m"}})
	c.post(sid, "tools:2", 1)
	program := `const [a, b] = await Promise.all([tools.echo({text: "one"}), tools.echo({text: "two"})]);
return a + b;`
	args, _ := json.Marshal(map[string]string{"code": program, "description": "echo twice"})
	evs := c.post(sid, "tool:run_code args:"+url.QueryEscape(string(args)), 2)

	// A turn whose lease another owner takes while its sleep call runs: the worker loses the
	// lease at the turn's next append (the call's result) or renewal and logs it, in the turn's
	// trace.
	asid := c.session(map[string]any{"name": "sleepy", "model": map[string]any{"provider": "scripted", "model": "m"}})
	c.do("POST", "/v1/sessions/"+asid+"/messages", map[string]string{"content": `tool:sleep args:{"ms":1500,"text":"slept"}`}, 202, nil)
	deadline := time.Now().Add(60 * time.Second)
	for !slices.ContainsFunc(c.events(asid), func(e obsEvent) bool { return e.Type == eventlog.TypeToolCall }) {
		if time.Now().After(deadline) {
			t.Fatalf("session %s: no tool/call in 60s", asid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := m.pool.Exec(context.Background(), `UPDATE session_counters SET run_owner = $2 WHERE session_id = $1`,
		uuid.MustParse(asid), uuid.New()); err != nil {
		t.Fatal(err)
	}
	waitLog(t, logs, "lease lost while serving", asid)
	// Code-mode sub-calls count as tool calls too: two native echo calls, two sub-calls.
	sc := m.scrape(t)
	if n, _ := sc.sum("gen_ai_execute_tool_duration_seconds_count", map[string]string{"gen_ai_tool_name": "echo", "error_type": ""}); n != 4 {
		t.Errorf("%v echo calls in the metrics, want 4", n)
	}
	if n, _ := sc.sum("gen_ai_execute_tool_duration_seconds_count", map[string]string{"gen_ai_tool_name": "run_code"}); n != 1 {
		t.Errorf("%v run_code calls in the metrics, want 1", n)
	}
	// Close flushes the batch span processor: every span of the two turns reaches the receiver.
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}

	rc.mu.Lock()
	spans, bad := rc.spans, rc.bad
	rc.mu.Unlock()
	if len(bad) > 0 {
		t.Fatalf("the receiver refused exports: %v", bad)
	}
	tree := newSpanTree(spans)
	t.Logf("the receiver got %d spans", len(spans))
	starts, endSeqs, traces := map[int]obsEvent{}, map[int]int64{}, map[int]obsEvent{}
	for _, ev := range evs {
		switch ev.Type {
		case eventlog.TypeTurnTrace:
			var d eventlog.TurnTrace
			_ = json.Unmarshal(ev.Data, &d)
			traces[d.Turn] = ev
		case eventlog.TypeTurnStart:
			var d eventlog.TurnStart
			_ = json.Unmarshal(ev.Data, &d)
			starts[d.Turn] = ev
		case eventlog.TypeTurnEnd:
			var d eventlog.TurnEnd
			_ = json.Unmarshal(ev.Data, &d)
			endSeqs[d.Turn] = ev.Seq
		}
	}
	turnSpans := map[int64]*tracepb.Span{}
	var askTrace string // the trace of the turn that lost its lease
	for _, s := range tree.children[""] {
		if s.Kind == tracepb.Span_SPAN_KIND_SERVER {
			continue // a request's span (TestTraceFromTheRequest)
		}
		if attrString(s, "dshd.session.id") == asid {
			if s.Name == "invoke_agent" {
				askTrace = hex.EncodeToString(s.TraceId)
			} // else the repair of its open turn, when the sweeper came before Close
			continue
		}
		if s.Name != "invoke_agent" {
			t.Errorf("unexpected root span %q", s.Name)
			continue
		}
		n, _ := attrInt(s, "dshd.turn")
		turnSpans[n] = s
	}
	if askTrace == "" {
		t.Fatal("no turn span of the session that lost its lease")
	}
	if len(turnSpans) != 2 {
		t.Fatalf("turn spans %v of %d spans", turnSpans, len(spans))
	}
	traceIDs := map[string]bool{}
	for n, turn := range turnSpans {
		tid := hex.EncodeToString(turn.TraceId)
		traceIDs[tid] = true
		for _, s := range spans {
			if hex.EncodeToString(s.TraceId) == tid && s.EndTimeUnixNano < s.StartTimeUnixNano {
				t.Errorf("span %s ends before it starts", s.Name)
			}
		}
		// The turn span: session, tenant, seq range of its events; turn/start carries its trace id.
		if attrString(turn, "dshd.session.id") != sid || attrString(turn, "dshd.tenant.id") != tenantID.String() ||
			attrString(turn, "dshd.turn.end_reason") != eventlog.EndCompleted {
			t.Errorf("turn %d span attributes %v", n, turn.Attributes)
		}
		first, ok1 := attrInt(turn, "dshd.seq.first")
		last, ok2 := attrInt(turn, "dshd.seq.last")
		if !ok1 || !ok2 || first != starts[int(n)].Seq || last != endSeqs[int(n)] {
			t.Errorf("turn %d seq range %d..%d (%v %v), want %d..%d", n, first, last, ok1, ok2, starts[int(n)].Seq, endSeqs[int(n)])
		}
		var trace eventlog.TurnTrace
		tr := traces[int(n)]
		_ = json.Unmarshal(tr.Data, &trace)
		if trace.TraceID != tid || !tr.Ignorable || tr.Seq != starts[int(n)].Seq+1 {
			t.Errorf("turn/trace %d %+v (seq %d, ignorable %v), span trace %s, turn/start at %d", n, trace, tr.Seq, tr.Ignorable, tid, starts[int(n)].Seq)
		}
		if strings.Contains(string(starts[int(n)].Data), "traceId") {
			t.Errorf("turn/start %d carries a traceId: %s", n, starts[int(n)].Data)
		}
		// Two steps (the tool step, then the answer), each with one model call.
		steps := tree.kids(turn, "dshd.step")
		if len(steps) != 2 {
			t.Fatalf("turn %d has %d step spans", n, len(steps))
		}
		slices.SortFunc(steps, func(a, b *tracepb.Span) int {
			x, _ := attrInt(a, "dshd.step")
			y, _ := attrInt(b, "dshd.step")
			return int(x - y)
		})
		for i, step := range steps {
			chats := tree.kids(step, "chat m")
			if len(chats) != 1 {
				t.Fatalf("turn %d step %d has %d chat spans", n, i+1, len(chats))
			}
			ch := chats[0]
			in, okIn := attrInt(ch, "gen_ai.usage.input_tokens")
			_, okOut := attrInt(ch, "gen_ai.usage.output_tokens")
			if ch.Kind != tracepb.Span_SPAN_KIND_CLIENT || attrString(ch, "gen_ai.operation.name") != "chat" ||
				attrString(ch, "gen_ai.request.model") != "m" || attrString(ch, "gen_ai.provider.name") != "scripted" ||
				!okIn || in <= 0 || !okOut || attr(ch, "gen_ai.response.finish_reasons") == nil {
				t.Errorf("turn %d step %d chat span %v", n, i+1, ch.Attributes)
			}
		}
		// Tool spans are children of their step, beside the step's model call.
		if tools := tree.kids(steps[1], "execute_tool echo"); len(tools) != 0 {
			t.Errorf("the answer step has tool spans %v", tools)
		}
		switch n {
		case 1:
			echoes := tree.kids(steps[0], "execute_tool echo")
			if len(echoes) != 2 {
				t.Fatalf("turn 1 step 1 has %d echo spans", len(echoes))
			}
			for _, e := range echoes {
				if attrString(e, "gen_ai.tool.name") != "echo" || attrString(e, "gen_ai.tool.call.id") == "" {
					t.Errorf("echo span %v", e.Attributes)
				}
			}
		case 2:
			runs := tree.kids(steps[0], "execute_tool run_code")
			if len(runs) != 1 {
				t.Fatalf("turn 2 step 1 has %d run_code spans", len(runs))
			}
			subs := tree.kids(runs[0], "execute_tool echo")
			if len(subs) != 2 {
				t.Fatalf("the run_code span has %d echo sub-call spans", len(subs))
			}
			for _, s := range subs {
				if attrString(s, "gen_ai.tool.call.id") == "" || attrString(s, "gen_ai.tool.name") != "echo" {
					t.Errorf("sub-call span %v", s.Attributes)
				}
			}
		}
	}
	// The worker's log lines of the sessions' turns carry their turn's trace id and a span id:
	// the runner's "turn ended" of both turns of the first session, and the serve's "lease lost
	// while serving" of the third, in the trace of the turn it was serving.
	ended, lost := 0, 0
	for _, l := range logs.lines() {
		tid, _ := l["trace_id"].(string)
		msg, _ := l["msg"].(string)
		switch {
		case l["session"] == sid && workerLines[msg]:
			if !traceIDs[tid] || l["span_id"] == nil {
				t.Errorf("worker log line %v: trace_id not of a turn of the session", l)
			}
			if msg == "turn ended" {
				ended++
			}
		case l["session"] == asid && msg == "crash repair closed an open turn":
			if tid == "" || l["span_id"] == nil { // in the repair's own trace
				t.Errorf("worker log line %v: no trace id", l)
			}
		case l["session"] == asid && workerLines[msg]:
			if tid != askTrace || l["span_id"] == nil {
				t.Errorf("worker log line %v: trace_id is not %s, the serving turn's", l, askTrace)
			}
			if msg == "lease lost while serving" {
				lost++
			}
		}
	}
	if ended != 2 || lost != 1 {
		t.Errorf("%d 'turn ended' (want 2) and %d 'lease lost while serving' (want 1) log lines:\n%s", ended, lost, logs.b.String())
	}
}

// TestTraceFromTheRequest: every request gets a server span named by its route; a caller's
// traceparent is that span's parent when the ingress is trusted (DSHD_TRACE_TRUST_INGRESS=1),
// else only its link; the turn that serves a posted message is an invoke_agent span in a trace of
// its own, linked to the post's span, and the turn resource names its trace.
func TestTraceFromTheRequest(t *testing.T) {
	t.Parallel()
	const callerTrace, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	for _, trust := range []bool{true, false} {
		t.Run(map[bool]string{true: "trusted", false: "untrusted"}[trust], func(t *testing.T) {
			t.Parallel()
			rc := newOTLPReceiver(t)
			m := NewMain()
			m.Logger = slog.New(slog.NewJSONHandler(io.Discard, nil))
			m.Config.DatabaseURL = pgtest.URL(t)
			m.Config.Addr = "127.0.0.1:0"
			m.Config.AdminToken = "admin"
			m.Config.TracesURL = rc.srv.URL + "/v1/traces"
			m.Config.Tracing.TrustIngress = trust
			if err := m.Run(context.Background()); err != nil {
				m.Close()
				t.Fatal(err)
			}
			t.Cleanup(func() { m.Close() })
			c, tenantID := newObsTenant(t, m)
			sid := c.session(map[string]any{"name": "traced", "model": map[string]any{"provider": "scripted", "model": "m"}})
			c.hdr = http.Header{"Traceparent": {"00-" + callerTrace + "-" + callerSpan + "-01"}}
			c.do("POST", "/v1/sessions/"+sid+"/messages", map[string]string{"content": "hello"}, 202, nil)
			c.hdr = nil
			c.waitTurns(sid, 1)
			var turns struct {
				Items []struct {
					TraceIDs []string `json:"traceIds"`
				} `json:"items"`
			}
			c.do("GET", "/v1/sessions/"+sid+"/turns", nil, 200, &turns)
			if err := m.Close(); err != nil {
				t.Fatal(err)
			}
			rc.mu.Lock()
			spans := rc.spans
			rc.mu.Unlock()

			var post, turn *tracepb.Span
			for _, s := range spans {
				switch {
				case s.Name == "POST /v1/sessions/{id}/messages":
					post = s
				case s.Name == "invoke_agent" && attrString(s, "dshd.session.id") == sid:
					turn = s
				}
				for _, kv := range s.Attributes {
					if strings.Contains(kv.Value.GetStringValue(), c.key) {
						t.Errorf("span %s carries the API key in %s", s.Name, kv.Key)
					}
				}
			}
			if post == nil || turn == nil {
				t.Fatalf("no post span (%v) or turn span (%v) among %d spans", post != nil, turn != nil, len(spans))
			}
			if post.Kind != tracepb.Span_SPAN_KIND_SERVER || attrString(post, "http.request.method") != "POST" ||
				attrString(post, "http.route") != "/v1/sessions/{id}/messages" || attrString(post, "dshd.session.id") != sid ||
				attrString(post, "dshd.tenant.id") != tenantID.String() {
				t.Errorf("post span %v %v", post.Kind, post.Attributes)
			}
			if code, _ := attrInt(post, "http.response.status_code"); code != 202 {
				t.Errorf("post span status %d", code)
			}
			postTrace, parent := hex.EncodeToString(post.TraceId), hex.EncodeToString(post.ParentSpanId)
			linked := func(s *tracepb.Span, traceID, spanID string) bool {
				return slices.ContainsFunc(s.Links, func(l *tracepb.Span_Link) bool {
					return hex.EncodeToString(l.TraceId) == traceID && hex.EncodeToString(l.SpanId) == spanID
				})
			}
			if trust {
				if postTrace != callerTrace || parent != callerSpan {
					t.Errorf("trusted: the post span is in trace %s under %s, want the caller's %s under %s", postTrace, parent, callerTrace, callerSpan)
				}
			} else if postTrace == callerTrace || parent != "" || !linked(post, callerTrace, callerSpan) {
				t.Errorf("untrusted: the post span is in trace %s under %q with links %v: want a new root linked to the caller", postTrace, parent, post.Links)
			}
			turnTrace := hex.EncodeToString(turn.TraceId)
			if turnTrace == postTrace || len(turn.ParentSpanId) != 0 || !linked(turn, postTrace, hex.EncodeToString(post.SpanId)) {
				t.Errorf("the turn span (trace %s, links %v) is not a root of its own linked to the post span", turnTrace, turn.Links)
			}
			if attrString(turn, "gen_ai.operation.name") != "invoke_agent" || attrString(turn, "gen_ai.conversation.id") != sid {
				t.Errorf("turn span attributes %v", turn.Attributes)
			}
			if len(turns.Items) != 1 || !slices.Equal(turns.Items[0].TraceIDs, []string{turnTrace}) {
				t.Errorf("the turn resource names traces %+v, want [%s]", turns.Items, turnTrace)
			}
		})
	}
}

// workerLines are the messages of the log lines the worker (its serve, the runner, the
// scheduler and code mode) writes while it serves a session's turn: each must carry the turn's
// trace id.
var workerLines = map[string]bool{
	"turn ended":                                true,
	"lease lost while serving":                  true,
	"serve failed; the session was handed over": true,
	"serve failed":                              true,
	"codemode: the sub-call log append failed":  true,
	"lease renewed again":                       true,
	"lease renewal failed; retrying":            true,
	"model call failed, retrying":               true,
	"crash repair closed an open turn":          true,
}

// waitApproval waits (a generous safety bound) for the session's pending approval and returns its id.
func (c obsClient) waitApproval(sid string) string {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var list struct {
			Items []struct{ ID string } `json:"items"`
		}
		c.do("GET", "/v1/sessions/"+sid+"/approvals", nil, 200, &list)
		if len(list.Items) == 1 {
			return list.Items[0].ID
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("session %s: no pending approval in 60s", sid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitLog waits (a generous safety bound) for a log line with msg keyed by session sid.
func waitLog(t *testing.T, logs *lockedBuffer, msg, sid string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		for _, l := range logs.lines() {
			if l["msg"] == msg && l["session"] == sid {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q log line of session %s in 60s", msg, sid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
