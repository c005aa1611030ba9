package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/dshd/dshd/api"
	"github.com/dshd/dshd/internal/mockllm"
	"github.com/dshd/dshd/internal/pgtest"
	"github.com/dshd/dshd/pkg/eventlog"
	et "github.com/dshd/dshd/pkg/eventlog/eventlogtest"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/pgstore"
)

// referenceLogs are the five logs the reference wrote: three kept in pkg/eventlog/testdata, two
// in testdata/reference-logs.
func referenceLogs(t *testing.T) map[string][]eventlog.Event {
	t.Helper()
	logs := et.ReferenceLogs(t, "../pkg/eventlog/testdata")
	for name, evs := range et.ReferenceLogs(t, "testdata/reference-logs") {
		logs[name] = evs
	}
	if len(logs) != 5 {
		t.Fatalf("%d reference logs, want five", len(logs))
	}
	return logs
}

// jsonl writes events one a line, as a log file holds them.
func jsonl(t testing.TB, evs []eventlog.Event) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, ev := range evs {
		line, err := ev.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// importLog posts a log to the import of preset pid with key.
func (r *replica) importLog(t testing.TB, key, pid string, body []byte) response {
	t.Helper()
	return r.do(t, "POST", "/v1/sessions/import?preset="+pid, key, body, "Content-Type", api.ExportContentType)
}

type imported struct {
	ID             string
	SeedLength     int64
	LastSeq        int64
	ImportedEvents int
	RepairedEvents int
}

// exported is a session export read by strictRead.
type exported struct {
	header eventlog.SessionHeader
	events []eventlog.Event
}

// exportOf reads GET .../export of sid with key through the strict reader.
func (r *replica) exportOf(t testing.TB, key, sid string) exported {
	t.Helper()
	resp := r.do(t, "GET", "/v1/sessions/"+sid+"/export", key, nil).want(t, http.StatusOK)
	if ct := resp.header.Get("Content-Type"); ct != api.ExportContentType {
		t.Fatalf("export content type %q", ct)
	}
	x, err := strictRead(resp.body)
	if err != nil {
		t.Fatalf("the strict reader refuses the export of %s: %v\n%s", sid, err, resp.body)
	}
	if x.header.ID != sid {
		t.Fatalf("export header id %s, want %s", x.header.ID, sid)
	}
	return x
}

// strictRead is a strict reader of DeepSeek Harness's log format, written from the rules
// (docs/rules.md) rather than with the server's code: the header (SES-16) on the first line and only there, with exactly its
// members and version 0; then one event a line with exactly SES-1's members (type, seq, time,
// data required; ignorable only as true), seqs consecutive from 0, times in epoch ms, an unknown
// type only when ignorable (SES-9), surfaceOp on the three surface kinds and only there (SES-2),
// the data of a known kind an object; every line ends with a newline and none is blank. The events
// must then load as a log (SES-1 to SES-12) and keep the SES-10 invariants.
func strictRead(body []byte) (exported, error) {
	var x exported
	if len(body) == 0 || body[len(body)-1] != '\n' {
		return x, fmt.Errorf("the log does not end with a newline")
	}
	lines := strings.Split(string(body[:len(body)-1]), "\n")
	headerKeys := []string{"version", "id", "createdAt", "cwd", "parentSession", "seedLength", "origin", "delegationDepth", "agentPreset", "owner"}
	eventKeys := []string{"type", "seq", "time", "data", "surfaceOp", "sourceEventSeqs", "ignorable"}
	members := func(line string, allowed, required []string) (map[string]json.RawMessage, error) {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			return nil, err
		}
		for k := range m {
			if !slices.Contains(allowed, k) {
				return nil, fmt.Errorf("member %q is not in the format", k)
			}
		}
		for _, k := range required {
			if _, ok := m[k]; !ok {
				return nil, fmt.Errorf("member %q is missing", k)
			}
		}
		return m, nil
	}
	h, err := members(lines[0], headerKeys, []string{"version", "id", "createdAt"})
	if err != nil {
		return x, fmt.Errorf("line 1 (header): %v", err)
	}
	if string(h["version"]) != "0" {
		return x, fmt.Errorf("line 1: version %s, want 0", h["version"])
	}
	if err := json.Unmarshal([]byte(lines[0]), &x.header); err != nil || x.header.CreatedAt <= 0 {
		return x, fmt.Errorf("line 1: header %v (createdAt %d)", err, x.header.CreatedAt)
	}
	surface := []string{"user/message", "assistant/message", "tool/result"}
	for i, line := range lines[1:] {
		n := i + 2
		m, err := members(line, eventKeys, []string{"type", "seq", "time", "data"})
		if err != nil {
			return x, fmt.Errorf("line %d: %v", n, err)
		}
		if _, ok := m["version"]; ok {
			return x, fmt.Errorf("line %d: a header after the first line", n)
		}
		var ev eventlog.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			return x, fmt.Errorf("line %d: %v", n, err)
		}
		if ign, ok := m["ignorable"]; ok && string(ign) != "true" {
			return x, fmt.Errorf("line %d: ignorable %s (only true is written)", n, ign)
		}
		switch {
		case ev.Seq != int64(i):
			return x, fmt.Errorf("line %d: seq %d, want %d", n, ev.Seq, i)
		case ev.Time <= 0:
			return x, fmt.Errorf("line %d: time %d is not epoch ms", n, ev.Time)
		case !eventlog.KnownType(ev.Type) && !ev.Ignorable:
			return x, fmt.Errorf("line %d: unknown type %q that is not ignorable", n, ev.Type)
		case slices.Contains(surface, ev.Type) != (ev.SurfaceOp != nil):
			return x, fmt.Errorf("line %d: %s with surfaceOp %v", n, ev.Type, ev.SurfaceOp)
		case !slices.Contains(surface, ev.Type) && ev.SourceEventSeqs != nil:
			return x, fmt.Errorf("line %d: %s cites events", n, ev.Type)
		case eventlog.KnownType(ev.Type) && (len(ev.Data) == 0 || ev.Data[0] != '{'):
			return x, fmt.Errorf("line %d: the data of %s is not an object", n, ev.Type)
		}
		x.events = append(x.events, ev)
	}
	if _, err := eventlog.LoadLog(x.events); err != nil {
		return x, err
	}
	return x, eventlog.CheckInvariants(x.events)
}

// sameJSON reports whether a and b are the same JSON value.
func sameJSON(t testing.TB, a, b any) bool {
	t.Helper()
	norm := func(v any) any {
		js, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var out any
		if err := json.Unmarshal(js, &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	return reflect.DeepEqual(norm(a), norm(b))
}

// TestImportExportRoundTripsTheReferenceLogs imports each reference log into a session of a
// preset of another model, reads its history (what the log implies), posts a followup that runs
// against the scripted model behind cmd/mockllm with the preset's model (not the log's request
// header's), and exports the session: the strict reader accepts it, and up to the import's
// session/end-seed it is the log as imported, event by event, the times the reference left out
// filled in.
func TestImportExportRoundTripsTheReferenceLogs(t *testing.T) {
	t.Parallel()
	m := mockllm.New(mockllm.Config{})
	ms := httptest.NewServer(m.Handler())
	t.Cleanup(func() { m.Close(); ms.Close() })
	u, _ := url.Parse(ms.URL)
	e := newEnvHosts(t, u.Host)
	var p struct{ ID string }
	e.do(t, "POST", "/v1/presets", e.keyA, `{"name":"imp","model":{"provider":"deepseek","model":"preset-model","baseUrl":"`+ms.URL+`"}}`).
		want(t, http.StatusCreated).json(t, &p)
	logs := referenceLogs(t)
	names := make([]string, 0, len(logs))
	for name := range logs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		ref := logs[name]
		t.Run(strings.TrimSuffix(name, ".jsonl"), func(t *testing.T) {
			var s imported
			e.importLog(t, e.keyA, p.ID, jsonl(t, ref)).want(t, http.StatusCreated).json(t, &s)
			n := int64(len(ref))
			if s.ImportedEvents != len(ref) || s.RepairedEvents != 0 || s.SeedLength != n || s.LastSeq != n {
				t.Fatalf("import %+v, want %d events, none repaired, the end-seed at seq %d", s, n, n)
			}
			want, err := eventlog.DeriveMessages(ref)
			if err != nil {
				t.Fatal(err)
			}
			var hist struct{ Messages []llm.Message }
			e.do(t, "GET", "/v1/sessions/"+s.ID+"/history", e.keyA, nil).want(t, http.StatusOK).json(t, &hist)
			if !sameJSON(t, hist.Messages, want) {
				t.Fatalf("history %+v\nwant the log's %+v", hist.Messages, want)
			}
			lastTurn := 0
			for _, ev := range ref {
				if n, ok := eventlog.TurnNumber(ev); ok && ev.Type == eventlog.TypeTurnStart {
					lastTurn = n
				}
			}

			before := len(m.Requests())
			evs := postStream(t, e.replica, s.ID, e.keyA, `{"content":"say:followup"}`).untilEnd(t)
			end := evs[len(evs)-1]
			var te eventlog.TurnEnd
			if err := json.Unmarshal(end.Data, &te); err != nil || end.Type != eventlog.TypeTurnEnd ||
				te.Reason.Kind != "completed" || te.Turn != lastTurn+1 {
				t.Fatalf("the followup ended %s %s, want turn %d completed", end.Type, end.Data, lastTurn+1)
			}
			reqs := m.Requests()[before:]
			if len(reqs) != 1 {
				t.Fatalf("%d model requests for the followup, want 1", len(reqs))
			}
			var req struct{ Model string }
			if err := json.Unmarshal(reqs[0], &req); err != nil || req.Model != "preset-model" {
				t.Fatalf("the followup asked model %q (%v), want the preset's preset-model", req.Model, err)
			}
			waitNoLease(t, e)

			x := e.exportOf(t, e.keyA, s.ID)
			if x.header.SeedLength == nil || *x.header.SeedLength != n || x.header.AgentPreset != "imp" || x.header.Owner != e.tenantA.String() {
				t.Fatalf("export header %+v", x.header)
			}
			if int64(len(x.events)) <= n+1 || x.events[n].Type != eventlog.TypeSessionEndSeed {
				t.Fatalf("export of %d events, want the %d imported, session/end-seed, the followup", len(x.events), n)
			}
			for i, want := range ref {
				got := x.events[i]
				var wd bytes.Buffer
				if err := json.Compact(&wd, want.Data); err != nil {
					t.Fatal(err)
				}
				wantTime := want.Time
				if wantTime == 0 {
					wantTime = x.header.CreatedAt // the import's time
				}
				if got.Type != want.Type || got.Seq != want.Seq || got.Time != wantTime || !bytes.Equal(got.Data, wd.Bytes()) ||
					!reflect.DeepEqual(got.SurfaceOp, want.SurfaceOp) || !reflect.DeepEqual(got.SourceEventSeqs, want.SourceEventSeqs) ||
					got.Ignorable != want.Ignorable {
					t.Fatalf("seq %d exported\n%+v\nimported\n%+v", i, got, want)
				}
			}
			var header eventlog.RequestHeader
			for _, ev := range x.events[n+1:] {
				if ev.Type == eventlog.TypeRequestHeader {
					if err := json.Unmarshal(ev.Data, &header); err != nil {
						t.Fatal(err)
					}
				}
			}
			if header.Reason != "resume" || header.Header.Config.Model != "preset-model" {
				t.Fatalf("the followup's request header %+v, want the preset's model with reason resume", header)
			}
		})
	}
}

// driveTurn reads a message stream to its turn/end, allowing every approval it asks for, and
// returns the events.
func driveTurn(t *testing.T, e *env, sid string, s *rawStream) []eventlog.Event {
	t.Helper()
	var out []eventlog.Event
	for f := range s.frames {
		if f.comment != "" {
			continue
		}
		ev := frameEvent(t, f)
		out = append(out, ev)
		switch ev.Type {
		case eventlog.TypeApprovalAsked:
			var a eventlog.ApprovalAsked
			if err := json.Unmarshal(ev.Data, &a); err != nil {
				t.Fatal(err)
			}
			e.do(t, "POST", "/v1/sessions/"+sid+"/approvals/"+a.ID, e.keyA, `{"outcome":"allowed-once"}`).want(t, http.StatusOK)
		case eventlog.TypeTurnEnd:
			return out
		}
	}
	t.Fatalf("the stream ended before turn/end: %v", types(out))
	return nil
}

// newCodeEnv is newEnv whose only replica mounts a code runtime: no worker without one can take a
// turn of a code-mode preset.
func newCodeEnv(t *testing.T) *env {
	t.Helper()
	pool := pgtest.Pool(t)
	e := &env{t: t, pool: pool, log: pgstore.NewStore(pool, pgstore.StoreConfig{}), code: true}
	tenants := pgstore.NewTenants(pool)
	a, keyA, err := tenants.TenantCreate(t.Context(), "tenant-a")
	if err != nil {
		t.Fatal(err)
	}
	b, keyB, err := tenants.TenantCreate(t.Context(), "tenant-b")
	if err != nil {
		t.Fatal(err)
	}
	e.tenantA, e.keyA, e.tenantB, e.keyB = a.ID, keyA, b.ID, keyB
	e.replica = e.newReplica()
	return e
}

// codeScript is the reference's code-mode script: one run_code program that calls echo twice.
const codeScript = `tools:1 tool:run_code args:%7B%22code%22%3A%22const%20a%20%3D%20await%20tools.echo(%7B%20text%3A%20'one'%20%7D)%3B%5Cnconst%20b%20%3D%20await%20tools.echo(%7B%20text%3A%20'two'%20%7D)%3B%5Cnreturn%20a%20%2B%20'%20'%20%2B%20b%3B%22%2C%22description%22%3A%22Echo%20twice%22%7D`

// TestExportOfANativeSessionIsStrict: a session of dshd's own, with an approval, a code-mode
// program, a cancel mid-stream and a fork, exports logs (its own and the fork's) that the strict
// reader accepts; the export is the log GET .../events shows; it imports back into a session
// that runs on.
func TestExportOfANativeSessionIsStrict(t *testing.T) {
	t.Parallel()
	e := newCodeEnv(t)
	sid := e.sessionOfPreset(t, e.keyA, `{"name":"native","model":{"provider":"scripted","model":"s"},"tools":{"mode":"both"},
		"approval":{"policy":"ask","ask":["echo"],"timeoutMs":60000}}`)
	kinds := map[string]bool{}
	for _, script := range []string{`tool:echo args:{"text":"approve-me"}`, codeScript} {
		body, _ := json.Marshal(map[string]string{"content": script})
		for _, ev := range driveTurn(t, e, sid, postStream(t, e.replica, sid, e.keyA, string(body))) {
			kinds[ev.Type] = true
		}
		waitNoLease(t, e)
	}
	s := postStream(t, e.replica, sid, e.keyA, `{"content":"text chunkdelay:1000"}`)
	for f := range s.frames {
		if f.comment == "" && frameEvent(t, f).Type == eventlog.TypeAssistantChunk {
			break
		}
	}
	e.do(t, "POST", "/v1/sessions/"+sid+"/cancel", e.keyA, `{}`).want(t, http.StatusOK)
	rest := s.untilEnd(t)
	if last := rest[len(rest)-1]; last.Type != eventlog.TypeTurnEnd || !strings.Contains(string(last.Data), "aborted") {
		t.Fatalf("the cancelled turn ended %s", last.Data)
	}
	waitNoLease(t, e)
	for _, k := range []string{eventlog.TypeApprovalAsked, eventlog.TypeApprovalDecided, eventlog.TypeToolCodeDispatchInit, eventlog.TypeToolCodeDispatch} {
		if !kinds[k] {
			t.Fatalf("the session wrote no %s: %v", k, kinds)
		}
	}
	var child struct{ ID string }
	e.do(t, "POST", "/v1/sessions", e.keyA, `{"fork":{"sessionId":"`+sid+`"}}`).want(t, http.StatusCreated).json(t, &child)

	x := e.exportOf(t, e.keyA, sid)
	if !sameJSON(t, x.events, e.allEvents(t, sid)) {
		t.Fatal("the export is not the log GET .../events shows")
	}
	fx := e.exportOf(t, e.keyA, child.ID)
	if fx.header.ParentSession != sid || fx.header.SeedLength == nil || *fx.header.SeedLength != int64(len(x.events)) ||
		fx.events[len(fx.events)-1].Type != eventlog.TypeSessionEndSeed {
		t.Fatalf("the fork's export header %+v, last %s", fx.header, fx.events[len(fx.events)-1].Type)
	}

	// Back in: the export (header line included) imports into a session that runs on.
	var p struct{ ID string }
	e.do(t, "POST", "/v1/presets", e.keyA, `{"name":"again","model":{"provider":"scripted","model":"s"}}`).want(t, http.StatusCreated).json(t, &p)
	raw := e.do(t, "GET", "/v1/sessions/"+sid+"/export", e.keyA, nil).want(t, http.StatusOK).body
	var s2 imported
	e.importLog(t, e.keyA, p.ID, raw).want(t, http.StatusCreated).json(t, &s2)
	if s2.ImportedEvents != len(x.events) || s2.RepairedEvents != 0 {
		t.Fatalf("re-import %+v", s2)
	}
	evs := postStream(t, e.replica, s2.ID, e.keyA, `{"content":"text"}`).untilEnd(t)
	if last := evs[len(evs)-1]; !strings.Contains(string(last.Data), "completed") {
		t.Fatalf("the re-imported session's turn ended %s", last.Data)
	}
	waitNoLease(t, e)
	y := e.exportOf(t, e.keyA, s2.ID)
	if !sameJSON(t, y.events[:len(x.events)], x.events) {
		t.Fatal("the re-imported log differs from the export")
	}

	// Tenants and scopes as GET .../events: another tenant's key finds nothing, a read-only key
	// exports but cannot import.
	e.do(t, "GET", "/v1/sessions/"+sid+"/export", e.keyB, nil).wantProblem(t, http.StatusNotFound, "not_found")
	var ro struct{ Secret string }
	e.do(t, "POST", "/v1/api-keys", e.keyA, `{"name":"ro","scopes":["read"]}`).want(t, http.StatusCreated).json(t, &ro)
	e.exportOf(t, ro.Secret, sid)
	e.importLog(t, ro.Secret, p.ID, raw).wantProblem(t, http.StatusForbidden, api.CodeInsufficientScope)
	e.importLog(t, e.keyB, p.ID, raw).wantProblem(t, http.StatusNotFound, "not_found")
}

func init() { contractExtras = append(contractExtras, importExportContract) }

// importExportContract checks GET .../export and POST /v1/sessions/import against openapi.yaml.
func importExportContract(t *testing.T, e *env, c *contract, sid, _ string) {
	const exp, imp = "/v1/sessions/{id}/export", "/v1/sessions/import"
	c.check("GET", exp, e.do(t, "GET", "/v1/sessions/"+sid+"/export", e.keyA, nil).want(t, http.StatusOK))
	c.check("GET", exp, e.do(t, "GET", "/v1/sessions/"+sid+"/export", e.keyB, nil).want(t, http.StatusNotFound))
	pid := e.presetCreate(t, e.keyA, minimalPreset).String()
	small := "{\"type\":\"turn/start\",\"seq\":0,\"data\":{\"turn\":1}}\n" +
		"{\"type\":\"turn/end\",\"seq\":1,\"data\":{\"turn\":1,\"reason\":{\"kind\":\"completed\"}}}\n"
	c.check("POST", imp, e.importLog(t, e.keyA, pid, []byte(small)).want(t, http.StatusCreated))
	c.check("POST", imp, e.importLog(t, e.keyA, pid, []byte(strings.Replace(small, `"seq":1`, `"seq":2`, 1))).want(t, http.StatusBadRequest))
	c.check("POST", imp, e.do(t, "POST", "/v1/sessions/import", e.keyA, small).want(t, http.StatusBadRequest))
	c.check("POST", imp, e.importLog(t, e.keyB, pid, []byte(small)).want(t, http.StatusNotFound))
	c.check("POST", imp, e.do(t, "POST", "/v1/sessions/import?preset="+pid, e.keyA, small, "Content-Type", "text/csv").want(t, http.StatusUnsupportedMediaType))
}

// importProblem is the 400 of a refused log.
type importProblem struct {
	api.Problem
	Line int
	Rule string
}

// TestImportRefusesBadLogs: a log that breaks a rule answers 400 invalid_request naming the rule
// and the body line of the first break, and creates nothing.
func TestImportRefusesBadLogs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pid := e.presetCreate(t, e.keyA, minimalPreset).String()
	text := jsonl(t, referenceLogs(t)["text.jsonl"])
	lines := strings.Split(strings.TrimSuffix(string(text), "\n"), "\n")
	edit := func(i int, from, to string) string {
		out := slices.Clone(lines)
		if !strings.Contains(out[i], from) {
			t.Fatalf("line %d lacks %q: %s", i+1, from, out[i])
		}
		out[i] = strings.Replace(out[i], from, to, 1)
		return strings.Join(out, "\n") + "\n"
	}
	header := `{"version":0,"id":"x","createdAt":1}`
	park, err := json.Marshal(eventlog.TurnParked{Turn: 1, Step: 1, Reason: eventlog.ParkClient,
		Waits: []eventlog.ParkWait{{Kind: eventlog.ParkClient, CallID: "c1", ToolName: "pick"}}})
	if err != nil {
		t.Fatal(err)
	}
	parked := `{"type":"turn/start","seq":0,"data":{"turn":1}}` + "\n" + `{"type":"step/start","seq":1,"data":{"turn":1,"step":1}}` + "\n" +
		`{"type":"turn/parked","seq":2,"ignorable":true,"data":` + string(park) + "}\n"
	for _, c := range []struct {
		name, body, rule string
		line             int
	}{
		{"not JSON", edit(3, `{"type"`, `{type`), "SES-1", 4},
		{"an unknown member", edit(1, `"seq":1`, `"seq":1,"extra":true`), "SES-1", 2},
		{"no seq", edit(1, `"seq":1,`, ``), "SES-1", 2},
		{"a seq gap", edit(5, `"seq":5`, `"seq":6`), "SES-1", 6},
		{"an unknown kind that is not ignorable", edit(6, `"request/context"`, `"request/contextual"`), "SES-9", 7},
		{"surfaceOp on a non-surface event", edit(1, `"seq":1`, `"seq":1,"surfaceOp":"append"`), "SES-2", 2},
		{"a citation of a later event", edit(4, `"surfaceOp":"append"`, `"surfaceOp":"append","sourceEventSeqs":[9]`), "SES-3", 5},
		{"a user message without id", edit(4, `"id":"m1"`, `"id":""`), "SES-6", 5},
		{"a step that does not start at 1", edit(3, `"step":1`, `"step":2`), "SES-10", 4},
		{"a header after the first line", strings.Join(append(slices.Clone(lines[:2]), append([]string{header}, lines[2:]...)...), "\n"), "SES-16", 3},
		{"a header of another version", `{"version":1,"id":"x","createdAt":1}` + "\n" + string(text), "SES-9", 1},
		{"a splice that removes what is not there", edit(2, `"removedCount":1`, `"removedCount":2`), "LOOP-1", 3},
		{"a parked last turn", parked, "E6", 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			var p importProblem
			r := e.importLog(t, e.keyA, pid, []byte(c.body))
			r.wantProblem(t, http.StatusBadRequest, "invalid_request")
			r.json(t, &p)
			if p.Rule != c.rule || p.Line != c.line || !strings.Contains(p.Detail, fmt.Sprintf("line %d: %s", c.line, c.rule)) {
				t.Fatalf("problem %+v, want rule %s at line %d", p, c.rule, c.line)
			}
		})
	}
	if n := e.sessionCount(t); n != 0 {
		t.Fatalf("%d sessions after refused imports, want none", n)
	}
	// The header line is optional, and is checked, not kept.
	var s imported
	e.importLog(t, e.keyA, pid, []byte(header+"\n"+string(text))).want(t, http.StatusCreated).json(t, &s)
	if s.ID == "x" || s.ImportedEvents != len(lines) {
		t.Fatalf("import with a header %+v", s)
	}
}

// TestSES14_ImportRepairsAnOpenLastTurn: a log cut inside a step with four calls logged and none
// answered is closed as crash repair closes it (SES-14): four TOOL_OUTCOME_UNKNOWN results,
// step/end and turn/end {interrupted}, before the seed marker; the session then runs on.
func TestSES14_ImportRepairsAnOpenLastTurn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pid := e.presetCreate(t, e.keyA, minimalPreset).String()
	ref := referenceLogs(t)["tools-4.jsonl"]
	cut := -1
	for i, ev := range ref {
		if ev.Type == eventlog.TypeToolResult {
			cut = i
			break
		}
	}
	var log []eventlog.Event
	for _, ev := range ref[:cut] {
		if ev.Type != eventlog.TypeToolResult {
			log = append(log, ev)
		}
	}
	var s imported
	e.importLog(t, e.keyA, pid, jsonl(t, log)).want(t, http.StatusCreated).json(t, &s)
	evs := e.allEvents(t, s.ID)
	closers := evs[len(log) : len(evs)-1]
	if s.RepairedEvents != len(closers) || s.SeedLength != int64(len(evs)-1) || evs[len(evs)-1].Type != eventlog.TypeSessionEndSeed {
		t.Fatalf("import %+v of a log of %d events stored %v", s, len(log), types(evs[len(log):]))
	}
	results := 0
	for _, ev := range closers {
		if ev.Type == eventlog.TypeToolResult && strings.Contains(string(ev.Data), "TOOL_OUTCOME_UNKNOWN") {
			results++
		}
	}
	last := closers[len(closers)-1]
	if results == 0 || closers[len(closers)-2].Type != eventlog.TypeStepEnd || last.Type != eventlog.TypeTurnEnd ||
		!strings.Contains(string(last.Data), eventlog.EndInterrupted) {
		t.Fatalf("closers %v", types(closers))
	}
	got := postStream(t, e.replica, s.ID, e.keyA, `{"content":"text"}`).untilEnd(t)
	if end := got[len(got)-1]; !strings.Contains(string(end.Data), "completed") {
		t.Fatalf("the turn after the repair ended %s", end.Data)
	}
	if err := eventlog.CheckInvariants(e.allEvents(t, s.ID)); err != nil {
		t.Fatal(err)
	}
}

// TestImportBodyLimit: a log larger than Config.ImportMaxBytes answers 413 payload_too_large and
// creates nothing; one within it imports.
func TestImportBodyLimit(t *testing.T) {
	t.Parallel()
	text := jsonl(t, referenceLogs(t)["text.jsonl"])
	e := newEnv(t, func(c *api.Config) { c.ImportMaxBytes = int64(len(text)) })
	pid := e.presetCreate(t, e.keyA, minimalPreset).String()
	big := append(slices.Clone(text), []byte("\n\n")...)
	e.importLog(t, e.keyA, pid, big).wantProblem(t, http.StatusRequestEntityTooLarge, api.CodePayloadTooLarge)
	if n := e.sessionCount(t); n != 0 {
		t.Fatalf("%d sessions after an oversized import", n)
	}
	e.importLog(t, e.keyA, pid, text).want(t, http.StatusCreated)

	// The general body limit does not bound an import: ImportMaxBytes replaces it on that route.
	small := newEnv(t, func(c *api.Config) { c.MaxBodyBytes = int64(len(text) / 2) })
	pid = small.presetCreate(t, small.keyA, minimalPreset).String()
	small.importLog(t, small.keyA, pid, text).want(t, http.StatusCreated)
}

// TestImportQuotas: at its session quota the tenant cannot import; an import that would take its
// logs past its stored-bytes quota is refused in its transaction and creates nothing.
func TestImportQuotas(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	limits := "/v1/tenants/" + e.tenantA.String() + "/limits"
	pid := e.presetCreate(t, e.keyA, minimalPreset).String()
	text := jsonl(t, referenceLogs(t)["text.jsonl"])

	e.do(t, "PUT", limits, adminToken, `{"maxLogBytes":1000}`).want(t, http.StatusOK)
	e.importLog(t, e.keyA, pid, text).wantProblem(t, http.StatusTooManyRequests, "quota_exceeded")
	if n := e.sessionCount(t); n != 0 {
		t.Fatalf("%d sessions after an import over the bytes quota", n)
	}
	e.do(t, "PUT", limits, adminToken, `{"maxLogBytes":1073741824,"maxSessions":1}`).want(t, http.StatusOK)
	e.importLog(t, e.keyA, pid, text).want(t, http.StatusCreated)
	e.importLog(t, e.keyA, pid, text).wantProblem(t, http.StatusTooManyRequests, "quota_exceeded")
	if n := e.sessionCount(t); n != 1 {
		t.Fatalf("%d sessions, want the one imported under the quota", n)
	}
}

// TestImportStrictReaderRefuses makes sure the strict reader can fail.
func TestImportStrictReaderRefuses(t *testing.T) {
	good := `{"version":0,"id":"s","createdAt":5}` + "\n" +
		`{"type":"turn/start","seq":0,"time":5,"data":{"turn":1}}` + "\n" +
		`{"type":"turn/end","seq":1,"time":5,"data":{"turn":1,"reason":{"kind":"completed"}}}` + "\n"
	if _, err := strictRead([]byte(good)); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		strings.TrimSuffix(good, "\n"),
		good[strings.Index(good, "\n")+1:],
		strings.Replace(good, `"seq":1`, `"seq":2`, 1),
		strings.Replace(good, `"turn/end"`, `"turn/ended"`, 1),
		strings.Replace(good, `"time":5,"data":{"turn":1}`, `"time":5,"ignorable":false,"data":{"turn":1}`, 1),
		strings.Replace(good, `"seq":0,`, `"seq":0,"extra":1,`, 1),
		strings.Replace(good, `"version":0`, `"version":1`, 1),
		strings.Replace(good, `"turn":1,"reason"`, `"turn":2,"reason"`, 1),
		good + "\n",
	} {
		if _, err := strictRead([]byte(bad)); err == nil {
			t.Errorf("the strict reader accepts %q", bad)
		}
	}
}
