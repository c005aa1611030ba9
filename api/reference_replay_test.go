package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"net/url"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/mockllm"
	"github.com/dshd/dshd/pkg/eventlog"
	et "github.com/dshd/dshd/pkg/eventlog/eventlogtest"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/registry"
)

// referenceReplay is how one reference log is played over HTTP: the preset, and what the test
// does while a turn runs (nil: wait for its end).
type referenceReplay struct {
	preset string
	// during, when set, runs while the turn of script n (from 0) streams; it cancels the turn.
	during func(t *testing.T, e *env, sid string, s *rawStream, n int)
}

// modelShape are data fields whose presence the model decides, not dshd: dshd's scripted model
// reports cache hits for the part of the history it saw before, the reference's reported none.
var modelShape = map[string][]string{
	eventlog.TypeAssistantChunk:   {"chunk.usage.cacheReadTokens", "chunk.usage.cacheMissTokens"},
	eventlog.TypeAssistantMessage: {"usage.cacheReadTokens", "usage.cacheMissTokens"},
}

// TestReferenceLogsOverHTTP replays the scripts of the reference's logs (the user messages they
// insert) over HTTP against the scripted model behind cmd/mockllm, cancelling where the reference did,
// and matches dshd's log with the reference's event by event: type, surface op, citations, and
// the shape of the data (its keys, recursively, and the kinds of their values). Normalised, and
// nothing else: ids and times (values are not compared), adjacent deltas of one block (dshd
// coalesces them within a window), dshd's ignorable extension events, the request header's
// content (the tools and prompt are the server's), the interleaving of a step's calls and results
// (it follows when the bodies settle), a later turn's request header and context of a new loop
// instance (resumed), and modelShape.
func TestReferenceLogsOverHTTP(t *testing.T) {
	t.Parallel()
	started := make(chan string, 16)
	waitEcho, err := registry.Define(registry.DefineSpec[holdArgs, string]{
		Name: "wait_echo", Description: "Wait until cancelled, then echo.", ConcurrencySafe: true,
	}, func(ctx context.Context, _ *registry.Execution, a holdArgs) (string, error) {
		started <- a.Text
		<-ctx.Done()
		return "", registry.NewError(registry.NameAbort, fault.CodeAborted, "tool call aborted")
	})
	if err != nil {
		t.Fatal(err)
	}
	// The reference ran against a scripted OpenAI-compatible model with its DeepSeek adapter: so
	// does dshd here (cmd/mockllm, the "deepseek" provider), with code mode's runtime mounted.
	m := mockllm.New(mockllm.Config{})
	ms := httptest.NewServer(m.Handler())
	t.Cleanup(func() { m.Close(); ms.Close() })
	u, _ := url.Parse(ms.URL)
	e := newEnvTools(t, u.Host, []*registry.Tool{waitEcho})
	e.code = true
	e.replica = e.newReplica()
	model := `"model":{"provider":"deepseek","model":"fake-model","baseUrl":"` + ms.URL + `"}`
	scripted := `{"name":"p",` + model + `}`
	cancel := func(t *testing.T, sid string) {
		var c struct{ Cancelled bool }
		e.do(t, "POST", "/v1/sessions/"+sid+"/cancel", e.keyA, `{}`).want(t, 200).json(t, &c)
		if !c.Cancelled {
			t.Fatal("the cancel found no running turn")
		}
	}
	replays := map[string]referenceReplay{
		"text.jsonl": {preset: scripted},
		// The reference's scheduler ran this one with two bodies at a time (SCHED-5).
		"tools-4.jsonl":   {preset: `{"name":"p",` + model + `,"tools":{"maxParallelToolCalls":2}}`},
		"code-mode.jsonl": {preset: `{"name":"p",` + model + `,"tools":{"mode":"code"}}`},
		"cancel-parallel.jsonl": {preset: scripted, during: func(t *testing.T, e *env, sid string, s *rawStream, n int) {
			if n == 0 {
				for range 4 {
					<-started
				}
				cancel(t, sid)
			}
		}},
		"cancel-mid-stream.jsonl": {preset: scripted, during: func(t *testing.T, e *env, sid string, s *rawStream, n int) {
			for deltas := 0; deltas < 3; {
				ev := frameEvent(t, s.next(t))
				var d struct{ Chunk struct{ Type string } }
				if ev.Type == eventlog.TypeAssistantChunk && json.Unmarshal(ev.Data, &d) == nil && d.Chunk.Type == "text-delta" {
					deltas++
				}
			}
			cancel(t, sid)
		}},
	}
	logs := et.ReferenceLogs(t, "../pkg/eventlog/testdata")
	for name, evs := range et.ReferenceLogs(t, "testdata/reference-logs") {
		logs[name] = evs
	}
	names := make([]string, 0, len(logs))
	for name := range logs {
		names = append(names, name)
	}
	sort.Strings(names)
	if len(names) != 5 {
		t.Fatalf("reference logs %v, want five", names)
	}
	for _, name := range names {
		ref := logs[name]
		rp, ok := replays[name]
		if !ok {
			t.Fatalf("%s: no replay", name)
		}
		t.Run(strings.TrimSuffix(name, ".jsonl"), func(t *testing.T) {
			sid := e.sessionOfPreset(t, e.keyA, rp.preset)
			for n, script := range referenceScripts(t, ref, name) {
				body, _ := json.Marshal(map[string]string{"content": script})
				s := postStream(t, e.replica, sid, e.keyA, string(body))
				if rp.during != nil {
					rp.during(t, e, sid, s, n)
				}
				s.untilEnd(t)
				// The next script is posted once the serve has let the lease go, so that this
				// replica serves it with the runner it keeps (one loop instance, as in the
				// reference, LOOP-3), not another replica's wake job.
				waitNoLease(t, e)
			}
			got := e.allEvents(t, sid)
			for _, ev := range got {
				if resumed(ev) {
					t.Fatalf("seq %d: a later turn started a new loop instance (request/header reason resume): the replica served it with a runner of its own, not the one its last serve put back", ev.Seq)
				}
			}
			if err := matchReference(normalReference(ref), normalReference(got)); err != nil {
				t.Fatalf("%s: %v\nreference %v\ndshd      %v", name, err, types(normalReference(ref)), types(normalReference(got)))
			}
		})
	}
}

// referenceScripts returns the contents of the user messages a reference log inserts into its
// inbox, in order; a slow stream's script gets the scripted model's chunk delay, so that the
// test can cancel after its third delta (the reference's script words are not dshd's grammar).
func referenceScripts(t *testing.T, evs []eventlog.Event, name string) []string {
	t.Helper()
	var out []string
	for _, ev := range evs {
		if ev.Type != eventlog.TypeInboxSpliced {
			continue
		}
		var s eventlog.InboxSpliced
		if err := json.Unmarshal(ev.Data, &s); err != nil {
			t.Fatal(err)
		}
		for _, m := range s.Inserted {
			if m.Source.Kind == llm.SourceUser {
				out = append(out, m.Text())
			}
		}
	}
	if name == "cancel-mid-stream.jsonl" {
		out[0] += " chunkdelay:1000"
	}
	return out
}

// normalReference drops ignorable events, merges adjacent deltas of one block and puts a step's
// tool/calls before its tool/results, renumbering the citations of what remains.
func normalReference(evs []eventlog.Event) []eventlog.Event {
	evs = callsBeforeResults(evs)
	pos := map[int64]int64{} // seq → the position of the event that stands for it
	var out []eventlog.Event
	var last struct {
		typ   string
		index int
	}
	for _, ev := range evs {
		if ev.Ignorable {
			continue
		}
		if ev.Type == eventlog.TypeAssistantChunk {
			var d struct {
				Chunk struct {
					Type  string
					Index int
				}
			}
			_ = json.Unmarshal(ev.Data, &d)
			if delta := strings.HasSuffix(d.Chunk.Type, "-delta"); delta && len(out) > 0 &&
				out[len(out)-1].Type == eventlog.TypeAssistantChunk && last.typ == d.Chunk.Type && last.index == d.Chunk.Index {
				pos[ev.Seq] = int64(len(out) - 1)
				continue
			}
			last.typ, last.index = d.Chunk.Type, d.Chunk.Index
		} else {
			last.typ = ""
		}
		pos[ev.Seq] = int64(len(out))
		ev.Seq = int64(len(out))
		if ev.SourceEventSeqs != nil {
			var cites []int64
			for _, c := range ev.SourceEventSeqs {
				if p := pos[c]; !slices.Contains(cites, p) {
					cites = append(cites, p)
				}
			}
			ev.SourceEventSeqs = cites
		}
		out = append(out, ev)
	}
	return out
}

// matchReference compares two normalised logs event by event.
func matchReference(ref, got []eventlog.Event) error {
	for i := range max(len(ref), len(got)) {
		if i >= len(ref) || i >= len(got) {
			return fmt.Errorf("%d events, the reference has %d", len(got), len(ref))
		}
		r, g := ref[i], got[i]
		if r.Type != g.Type || fmt.Sprint(r.SurfaceOp) != fmt.Sprint(g.SurfaceOp) && !(r.SurfaceOp != nil && g.SurfaceOp != nil && *r.SurfaceOp == *g.SurfaceOp) {
			return fmt.Errorf("event %d: %s %v, the reference has %s %v", i, g.Type, g.SurfaceOp, r.Type, r.SurfaceOp)
		}
		if !slices.Equal(r.SourceEventSeqs, g.SourceEventSeqs) {
			return fmt.Errorf("event %d (%s): cites %v, the reference %v", i, g.Type, g.SourceEventSeqs, r.SourceEventSeqs)
		}
		rs, gs := dataShape(r), dataShape(g)
		if !slices.Equal(rs, gs) {
			return fmt.Errorf("event %d (%s): data shape\n  dshd      %v\n  reference %v", i, g.Type, gs, rs)
		}
	}
	return nil
}

// dataShape returns the paths of an event's data with the kind of each value ("turn:number",
// "message.content[].type:string"), sorted, less the request header's content and modelShape.
func dataShape(ev eventlog.Event) []string {
	var v any
	d := json.NewDecoder(bytes.NewReader(ev.Data))
	_ = d.Decode(&v)
	seen := map[string]bool{}
	var skip []string
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			if len(x) == 0 {
				seen[path+":{}"] = true
			}
			for k, c := range x {
				p := strings.TrimPrefix(path+"."+k, ".")
				if slices.Contains(skip, p) {
					continue
				}
				if ev.Type == eventlog.TypeRequestHeader && p == "header" {
					seen[p+":opaque"] = true
					continue
				}
				walk(p, c)
			}
		case []any:
			if len(x) == 0 {
				seen[path+":[]"] = true
			}
			for _, c := range x {
				walk(path+"[]", c)
			}
		case string:
			seen[path+":string"] = true
		case float64:
			seen[path+":number"] = true
		case bool:
			seen[path+":bool"] = true
		case nil:
			seen[path+":null"] = true
		}
	}
	skip = modelShape[ev.Type]
	walk("", v)
	out := make([]string, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// callsBeforeResults reorders each run of adjacent tool/call and tool/result events into its calls
// then its results, each in their order: how they interleave follows when the bodies settle
// (SCHED-5), which neither log fixes.
func callsBeforeResults(evs []eventlog.Event) []eventlog.Event {
	out := make([]eventlog.Event, 0, len(evs))
	for i := 0; i < len(evs); {
		j := i
		for j < len(evs) && (evs[j].Type == eventlog.TypeToolCall || evs[j].Type == eventlog.TypeToolResult) {
			j++
		}
		if j == i {
			out = append(out, evs[i])
			i++
			continue
		}
		for _, typ := range []string{eventlog.TypeToolCall, eventlog.TypeToolResult} {
			for _, ev := range evs[i:j] {
				if ev.Type == typ {
					out = append(out, ev)
				}
			}
		}
		i = j
	}
	return out
}

// waitNoLease waits until the env's tenant A holds no run lease (its serves have ended).
func waitNoLease(t *testing.T, e *env) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	bound := time.After(10 * time.Second) // a generous bound on a property
	for {
		n, err := e.log.LeasesHeld(t.Context(), e.tenantA)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		select {
		case <-tick.C:
		case <-bound:
			t.Fatalf("%d leases still held", n)
		}
	}
}

// resumed reports whether ev is the request header of a new loop instance (LOOP-3 reason
// "resume"): a single-process reference never writes one, and neither does a replica that
// serves each turn with the runner its last serve put back (the next serve waits for it:
// pkg/worker runnerCache.checkout).
func resumed(ev eventlog.Event) bool {
	if ev.Type != eventlog.TypeRequestHeader {
		return false
	}
	var d struct{ Reason string }
	return json.Unmarshal(ev.Data, &d) == nil && d.Reason == "resume"
}
