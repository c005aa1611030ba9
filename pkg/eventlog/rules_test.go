package eventlog_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	et "github.com/dshd/dshd/pkg/eventlog/eventlogtest"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
)

func TestSES1_LosslessDataAndContiguousSeq(t *testing.T) {
	t.Parallel()
	bad := map[string]eventlog.NewEvent{
		"negative zero":            et.Raw("turn/start", `{"turn":1,"x":-0}`),
		"negative zero fraction":   et.Raw("turn/start", `{"turn":1,"x":-0.0}`),
		"negative zero exponent":   et.Raw("turn/start", `{"turn":1,"x":-0e0}`),
		"underflow to -0":          et.Raw("turn/start", `{"turn":1,"x":-1e-400}`),
		"overflow":                 et.Raw("turn/start", `{"turn":1,"x":1e400}`),
		"nested negative zero":     et.Raw("todo/write", `{"todos":[],"deep":[{"a":[-0]}]}`),
		"invalid JSON":             et.Raw("turn/start", `{"turn":1`),
		"trailing data":            et.Raw("turn/start", `{"turn":1} {}`),
		"invalid UTF-8":            et.Raw("turn/start", "{\"turn\":1,\"s\":\"\xff\"}"),
		"lone surrogate":           et.Raw("turn/start", `{"turn":1,"s":"\ud800"}`),
		"lone low surrogate":       et.Raw("turn/start", `{"turn":1,"s":"\udc00x"}`),
		"duplicate keys":           et.Raw("turn/start", `{"turn":1,"turn":2}`),
		"duplicate escaped keys":   et.Raw("turn/start", `{"turn":1,"t\u0075rn":2}`),
		"NaN (Go float)":           et.NE("turn/start", map[string]any{"turn": 1, "x": math.NaN()}),
		"negative zero (Go float)": et.NE("turn/start", map[string]any{"turn": 1, "x": math.Copysign(0, -1)}),
		"array data":               et.Raw("turn/start", `[1]`),
		"string data":              et.Raw("turn/start", `"x"`),
		"no data":                  {Type: "turn/start"},
	}
	for name, ev := range bad {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l := eventlog.NewLog(nil)
			et.MustAppend(t, l, et.TurnStart(1))
			_, err := l.Append(et.StepStart(1, 1), ev)
			if err == nil {
				t.Fatal("append succeeded")
			}
			if !strings.HasPrefix(name, "array") && !strings.HasPrefix(name, "string") {
				et.WantRule(t, err, "SES-1")
			}
			if l.Len() != 1 {
				t.Fatalf("log has %d events after a failing append, want 1", l.Len())
			}
		})
	}
	l := eventlog.NewLog(nil)
	evs := et.MustAppend(t, l, et.Raw("turn/start", "{ \"turn\" : 1, \"big\": 123456789012345678901234567890, \"s\": \"\\ud83d\\ude00 é\" }"),
		et.StepStart(1, 1))
	if got := string(evs[0].Data); got != `{"turn":1,"big":123456789012345678901234567890,"s":"\ud83d\ude00 é"}` {
		t.Fatalf("data = %s, want compact and otherwise byte-exact", got)
	}
	for i, ev := range l.Events() {
		if ev.Seq != int64(i) {
			t.Fatalf("seq %d at index %d", ev.Seq, i)
		}
	}
	if err := l.AppendEvents(eventlog.Event{Type: "step/end", Seq: 5, Data: json.RawMessage(`{"turn":1,"step":1}`)}); err == nil {
		t.Fatal("a non-contiguous seq was accepted")
	}
}

func TestSES2_SurfaceMarkers(t *testing.T) {
	t.Parallel()
	cases := map[string]eventlog.NewEvent{
		"user/message without surfaceOp":       {Type: "user/message", Data: et.UserMsg("m1", "hi")},
		"turn/start with surfaceOp":            {Type: "turn/start", Data: map[string]int{"turn": 1}, SurfaceOp: eventlog.Append},
		"turn/start with sourceEventSeqs":      {Type: "turn/start", Data: map[string]int{"turn": 1}, SourceEventSeqs: []int64{0}},
		"tool/call with empty sourceEventSeqs": {Type: "tool/call", Data: map[string]any{"turn": 1, "step": 1, "callId": "c", "name": "n", "arguments": ""}, SourceEventSeqs: []int64{}},
	}
	for name, ev := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := eventlog.NewLog(nil).Append(ev)
			et.WantRule(t, err, "SES-2")
		})
	}
	var op eventlog.SurfaceOp
	for _, bad := range []string{`"prepend"`, `{"op":"replace","start":1}`, `{"op":"replace","start":-1,"end":2}`, `{"op":"replace","start":1,"end":2,"x":1}`} {
		if err := json.Unmarshal([]byte(bad), &op); err == nil {
			t.Errorf("surfaceOp %s accepted", bad)
		}
	}
}

func TestSES3_SourceEventSeqs(t *testing.T) {
	t.Parallel()
	base := func(t *testing.T) *eventlog.Log {
		l := eventlog.NewLog(nil)
		et.MustAppend(t, l, et.TurnStart(1), et.StepStart(1, 1), et.User("m1", "a"), et.User("m2", "b"), et.User("m3", "c"))
		return l // surface nodes 2, 3, 4
	}
	msg := et.UserMsg("s1", "summary")
	bad := map[string]eventlog.NewEvent{
		"duplicate":            {Type: "user/message", Data: msg, SurfaceOp: eventlog.Append, SourceEventSeqs: []int64{2, 2}},
		"negative":             {Type: "user/message", Data: msg, SurfaceOp: eventlog.Append, SourceEventSeqs: []int64{-1}},
		"not earlier":          {Type: "user/message", Data: msg, SurfaceOp: eventlog.Append, SourceEventSeqs: []int64{5}},
		"empty on user":        {Type: "user/message", Data: msg, SurfaceOp: eventlog.Append, SourceEventSeqs: []int64{}},
		"start not on surface": {Type: "user/message", Data: msg, SurfaceOp: eventlog.ReplaceOp(1, 3), SourceEventSeqs: []int64{1, 2, 3}},
		"end not on surface":   {Type: "user/message", Data: msg, SurfaceOp: eventlog.ReplaceOp(2, 7), SourceEventSeqs: []int64{2, 3}},
		"start after end":      {Type: "user/message", Data: msg, SurfaceOp: eventlog.ReplaceOp(4, 2), SourceEventSeqs: []int64{2, 3, 4}},
		"missing cited node":   {Type: "user/message", Data: msg, SurfaceOp: eventlog.ReplaceOp(2, 4), SourceEventSeqs: []int64{2, 4}},
	}
	for name, ev := range bad {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l := base(t)
			_, err := l.Append(ev)
			et.WantRule(t, err, "SES-3")
			if l.Len() != 5 || l.ReplaceGeneration() != 0 {
				t.Fatalf("log changed: len %d, generation %d", l.Len(), l.ReplaceGeneration())
			}
		})
	}
	l := base(t)
	et.MustAppend(t, l, et.Assistant(1, 1, et.AssistantMsg("a1", llm.TextBlock("x")))) // [] allowed on assistant/message
	et.MustAppend(t, l, eventlog.NewEvent{Type: "user/message", Data: msg, SurfaceOp: eventlog.ReplaceOp(2, 3), SourceEventSeqs: []int64{2, 3}})
	if got := l.Surface(); len(got) != 3 || got[0] != 6 || got[1] != 4 || got[2] != 5 {
		t.Fatalf("surface = %v, want [6 4 5]", got)
	}
	if l.ReplaceGeneration() != 1 {
		t.Fatalf("replaceGeneration = %d, want 1", l.ReplaceGeneration())
	}
}

// toolLog returns a turn with two tool calls and their results; the surface is 2 (user), 3
// (assistant), 5 (result c1), 7 (result c2).
func toolLog(t *testing.T) *eventlog.Log {
	l := eventlog.NewLog(nil)
	et.MustAppend(t, l, et.TurnStart(1), et.StepStart(1, 1), et.User("m1", "go"),
		et.Assistant(1, 1, et.AssistantMsg("a1", llm.ToolCallBlock("c1", "echo", "{}"), llm.ToolCallBlock("c2", "echo", "{}"))),
		et.ToolCall(1, 1, "c1"))
	et.MustAppend(t, l, et.ToolResult(1, 1, "r1", "c1", "long output", 4), et.ToolCall(1, 1, "c2"))
	et.MustAppend(t, l, et.ToolResult(1, 1, "r2", "c2", "other", 6))
	return l // surface: 2, 3, 5, 7
}

func TestSES4_ToolResultReplacement(t *testing.T) {
	t.Parallel()
	replace := func(start, end int64, m llm.Message, extra map[string]any) eventlog.NewEvent {
		d := map[string]any{"turn": 1, "step": 1, "message": m}
		for k, v := range extra {
			d[k] = v
		}
		src := []int64{}
		for s := start; s <= end; s++ {
			src = append(src, s)
		}
		return eventlog.NewEvent{Type: "tool/result", Data: d, SurfaceOp: eventlog.ReplaceOp(start, end), SourceEventSeqs: src}
	}
	pruned := llm.NewToolResultMessage("r1", "c1", []llm.Block{llm.TextBlock("[pruned]")}, false)
	bad := map[string]eventlog.NewEvent{
		"two nodes":         replace(5, 7, pruned, nil),
		"not a tool/result": replace(3, 3, llm.NewToolResultMessage("a1", "c1", []llm.Block{}, false), nil),
		"isError changed":   replace(5, 5, llm.NewToolResultMessage("r1", "c1", []llm.Block{llm.TextBlock("x")}, true), nil),
		"id changed":        replace(5, 5, llm.NewToolResultMessage("r9", "c1", []llm.Block{llm.TextBlock("x")}, false), nil),
		"field added":       replace(5, 5, pruned, map[string]any{"meta": map[string]int{"a": 1}}),
	}
	for name, ev := range bad {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l := toolLog(t)
			_, err := l.Append(ev)
			et.WantRule(t, err, "SES-4")
		})
	}
	l := toolLog(t)
	et.MustAppend(t, l, replace(5, 5, pruned, nil))
	msgs, err := l.DeriveMessages()
	if err != nil {
		t.Fatal(err)
	}
	if got := msgs[2].Content[0].Content[0].Text; got != "[pruned]" {
		t.Fatalf("derived result content = %q, want the pruned content", got)
	}
}

func TestSES5_DeriveMessages(t *testing.T) {
	t.Parallel()
	l := toolLog(t)
	et.MustAppend(t, l, et.StepEnd(1, 1), et.StepStart(1, 2), et.Assistant(1, 2, et.AssistantMsg("a-empty")),
		et.Assistant(1, 2, et.AssistantMsg("a2", llm.TextBlock("done"))), et.StepEnd(1, 2), et.TurnEnd(1))
	msgs, err := l.DeriveMessages()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range msgs {
		ids = append(ids, m.ID)
	}
	if strings.Join(ids, ",") != "m1,a1,r1,r2,a2" {
		t.Fatalf("derived ids = %v, want the empty assistant message skipped", ids)
	}
	// After a replacement the cache is rebuilt.
	et.MustAppend(t, l, eventlog.NewEvent{Type: "user/message", Data: et.UserMsg("sum", "summary"),
		SurfaceOp: eventlog.ReplaceOp(2, 7), SourceEventSeqs: []int64{2, 3, 5, 7}})
	msgs, _ = l.DeriveMessages()
	ids = ids[:0]
	for _, m := range msgs {
		ids = append(ids, m.ID)
	}
	if strings.Join(ids, ",") != "sum,a2" {
		t.Fatalf("derived ids after replace = %v", ids)
	}
	again, err := eventlog.DeriveMessages(l.Events())
	if err != nil || len(again) != 2 {
		t.Fatalf("DeriveMessages over the events = %v, %v", again, err)
	}
}

func TestSES6_MessageShapes(t *testing.T) {
	t.Parallel()
	noProvider := et.AssistantMsg("a1", llm.TextBlock("x"))
	noProvider.Source.Provider = ""
	mismatch := llm.NewToolResultMessage("r1", "c1", nil, false)
	mismatch.Content[0].ToolCallID = "c2"
	cases := map[string]eventlog.NewEvent{
		"user message without id":          {Type: "user/message", Data: et.UserMsg("", "x"), SurfaceOp: eventlog.Append},
		"user message with role assistant": {Type: "user/message", Data: et.AssistantMsg("a", llm.TextBlock("x")), SurfaceOp: eventlog.Append},
		"user message without content":     et.Raw("user/message", `{"id":"m","role":"user","source":{"kind":"user"}}`),
		"assistant without provider":       et.Assistant(1, 1, noProvider),
		"assistant with user role":         {Type: "assistant/message", SurfaceOp: eventlog.Append, Data: map[string]any{"turn": 1, "step": 1, "message": et.UserMsg("u", "x")}},
	}
	cases["user message without content"] = eventlog.NewEvent{Type: "user/message", SurfaceOp: eventlog.Append,
		Data: json.RawMessage(`{"id":"m","role":"user","source":{"kind":"user"}}`)}
	for name, ev := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := eventlog.NewLog(nil).Append(ev)
			et.WantRule(t, err, "SES-6")
		})
	}
	_, err := eventlog.NewLog(nil).Append(eventlog.NewEvent{Type: "tool/result", SurfaceOp: eventlog.Append,
		SourceEventSeqs: []int64{0}, Data: map[string]any{"turn": 1, "step": 1, "message": mismatch}})
	et.WantRule(t, err, "SES-7")
}

func TestSES7_ToolResultShape(t *testing.T) {
	t.Parallel()
	ok := llm.NewToolResultMessage("r1", "c1", []llm.Block{llm.TextBlock("x")}, true)
	cases := map[string]map[string]any{
		"error without code":  {"turn": 1, "step": 1, "message": ok, "error": map[string]string{"name": "E"}},
		"user-sourced result": {"turn": 1, "step": 1, "message": et.UserMsg("u", "x")},
		"no message":          {"turn": 1, "step": 1},
		"no step":             {"turn": 1, "message": ok},
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := eventlog.NewLog(nil).Append(eventlog.NewEvent{Type: "tool/result", SurfaceOp: eventlog.Append,
				SourceEventSeqs: []int64{0}, Data: data})
			et.WantRule(t, err, "SES-7")
		})
	}
	l := eventlog.NewLog(nil)
	et.MustAppend(t, l, et.TurnStart(1))
	et.MustAppend(t, l, eventlog.NewEvent{Type: "tool/result", SurfaceOp: eventlog.Append, SourceEventSeqs: []int64{0},
		Data: map[string]any{"turn": 1, "step": 1, "message": ok, "error": map[string]string{"name": "ToolTimeoutError", "code": "TOOL_TIMEOUT"}}})
}

func TestSES8_CoreDataShapes(t *testing.T) {
	t.Parallel()
	bad := map[string]eventlog.NewEvent{
		"turn/start turn 0":             et.Raw("turn/start", `{"turn":0}`),
		"turn/start fractional turn":    et.Raw("turn/start", `{"turn":1.5}`),
		"turn/end without reason":       et.Raw("turn/end", `{"turn":1}`),
		"step/start without step":       et.Raw("step/start", `{"turn":1}`),
		"assistant/chunk without chunk": et.Raw("assistant/chunk", `{"turn":1,"step":1}`),
		"tool/call without arguments":   et.Raw("tool/call", `{"turn":1,"step":1,"callId":"c","name":"n"}`),
		"tool/call object arguments":    et.Raw("tool/call", `{"turn":1,"step":1,"callId":"c","name":"n","arguments":{}}`),
		"tool/call without callId":      et.Raw("tool/call", `{"turn":1,"step":1,"name":"n","arguments":""}`),
		"todo/write bad todo":           et.Raw("todo/write", `{"todos":[{"content":"x"}]}`),
		"request/context without model": et.Raw("request/context", `{"provider":"p"}`),
		"inbox splice bad target":       et.Raw("agent/inbox/spliced", `{"target":"later","start":0,"inserted":[]}`),
		"code-dispatch without ids":     et.Raw("tool/code-dispatch", `{"name":"echo","arguments":{},"isError":false,"content":[]}`),
		"approval/asked without tool":   et.Raw("approval/asked", `{"id":"a"}`),
		"approval/decided numeric id":   et.Raw("approval/decided", `{"id":1,"outcome":"rejected"}`),
		"session/end-seed array":        et.Raw("session/end-seed", `[]`),
		"llm/retry without step":        et.Raw("llm/retry", `{"turn":1,"attempt":1,"code":"SERVER","delayMs":250}`),
		"llm/retry negative delay":      et.Raw("llm/retry", `{"turn":1,"step":1,"attempt":1,"code":"SERVER","delayMs":-1}`),
		"llm/retry without code":        et.Raw("llm/retry", `{"turn":1,"step":1,"attempt":1,"delayMs":250}`),
	}
	for name, ev := range bad {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := eventlog.NewLog(nil).Append(ev)
			et.WantRule(t, err, "SES-8")
		})
	}
	l := eventlog.NewLog(nil)
	et.MustAppend(t, l, et.Raw("session/end-seed", `{}`), et.Raw("compact/start", `{"x":1}`), et.Raw("team/spawned", `{}`),
		et.Raw("agent/inbox/spliced", `{"target":"next-step","start":0,"removedCount":1,"inserted":[]}`),
		et.Raw("approval/asked", `{"id":"a","toolName":"echo"}`), et.Raw("approval/decided", `{"id":"a","outcome":"allowed-once"}`),
		// llm/retry as dshd writes it and as the reference does.
		et.Raw("llm/retry", `{"turn":1,"step":1,"provider":"deepseek","attempt":1,"maxRetries":2,"delayMs":250,"code":"SERVER","message":"HTTP 500","status":500}`),
		et.Raw("llm/retry", `{"retryId":"r1","turn":1,"step":1,"provider":"deepseek-official","mode":"normal","policyKey":"k","retry":1,"maxRetries":5,"delayMs":1000,"failure":{"message":"m","code":"RATE_LIMIT","status":429}}`))
}

func TestSES9_UnknownTypesAndVersion(t *testing.T) {
	t.Parallel()
	l := eventlog.NewLog(nil)
	_, err := l.Append(et.Raw("future/thing", `{}`))
	et.WantRule(t, err, "SES-9")
	et.MustAppend(t, l, eventlog.NewEvent{Type: "future/thing", Data: json.RawMessage(`[1,2]`), Ignorable: true})
	if _, err := eventlog.LoadLog([]eventlog.Event{{Type: "future/thing", Seq: 0, Data: json.RawMessage(`{}`)}}); err == nil {
		t.Fatal("a log with an unknown, non-ignorable event was loaded")
	}
	if _, err := eventlog.DeriveMessages([]eventlog.Event{{Type: "future/thing", Seq: 0, Data: json.RawMessage(`{}`)}}); err == nil {
		t.Fatal("DeriveMessages accepted an unknown, non-ignorable event")
	}
	if _, err := eventlog.LoadLog(l.Events()); err != nil {
		t.Fatalf("an ignorable unknown event refused the log: %v", err)
	}
	h := eventlog.SessionHeader{Version: 1, ID: "s", CreatedAt: 1}
	if err := h.Validate(); err == nil {
		t.Fatal("format version 1 accepted")
	}
}

func TestSES10_CheckInvariants(t *testing.T) {
	t.Parallel()
	build := func(evs ...eventlog.NewEvent) []eventlog.Event {
		l := eventlog.NewLog(nil)
		return et.MustAppend(t, l, evs...)
	}
	bad := map[string][]eventlog.Event{
		"nested turns":            build(et.TurnStart(1), et.TurnStart(2)),
		"turn numbers skip":       build(et.TurnStart(1), et.TurnEnd(1), et.TurnStart(3)),
		"turn/end with open step": build(et.TurnStart(1), et.StepStart(1, 1), et.TurnEnd(1)),
		"turn/end wrong turn":     build(et.TurnStart(1), et.TurnEnd(2)),
		"step not from 1":         build(et.TurnStart(1), et.StepStart(1, 2)),
		"chunk outside step":      build(et.TurnStart(1), et.Raw("assistant/chunk", `{"turn":1,"step":1,"chunk":{}}`)),
		"result without call":     build(et.TurnStart(1), et.StepStart(1, 1), et.ToolResult(1, 1, "r", "c1", "x", 1)),
		"result of other step":    build(et.TurnStart(1), et.StepStart(1, 1), et.ToolCall(1, 1, "c1"), et.StepEnd(1, 1), et.StepStart(1, 2), et.ToolResult(1, 2, "r", "c1", "x", 2)),
		"header outside turn": build(et.Raw("request/header",
			`{"header":{"config":{"provider":"p","model":"m"}},"reason":"initial"}`)),
		"todo outside turn": build(et.Raw("todo/write", `{"todos":[]}`)),
	}
	for name, evs := range bad {
		if err := eventlog.CheckInvariants(evs); err == nil {
			t.Errorf("%s: no violation found", name)
		}
	}
	good := build(et.TurnStart(1), et.StepStart(1, 1), et.ToolCall(1, 1, "c1"), et.ToolResult(1, 1, "r", "c1", "x", 2),
		et.StepEnd(1, 1), et.StepStart(1, 2), et.StepEnd(1, 2), et.TurnEnd(1), et.TurnStart(2), et.TurnEnd(2))
	if err := eventlog.CheckInvariants(good); err != nil {
		t.Fatal(err)
	}
	for name, evs := range et.ReferenceLogs(t, "testdata") {
		if err := eventlog.CheckInvariants(evs); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestSES12_SeedValidation(t *testing.T) {
	t.Parallel()
	ev := func(seq int64, typ, data string) eventlog.Event {
		return eventlog.Event{Type: typ, Seq: seq, Data: json.RawMessage(data)}
	}
	bad := map[string][]eventlog.Event{
		"not contiguous":     {ev(0, "turn/start", `{"turn":1}`), ev(2, "turn/end", `{"turn":1,"reason":{"kind":"completed"}}`)},
		"not from 0":         {ev(1, "turn/start", `{"turn":1}`)},
		"header lacks model": {ev(0, "request/header", `{"header":{"config":{"provider":"p"}},"reason":"initial"}`)},
		"header marker for absent field": {ev(0, "request/header",
			`{"header":{"config":{"provider":"p","model":"m"},"adapterDefaults":{"maxTokens":true}},"reason":"initial"}`)},
		"negative zero":      {ev(0, "turn/start", `{"turn":1,"x":-0}`)},
		"surface without op": {ev(0, "user/message", `{"id":"m","role":"user","source":{"kind":"user"},"content":[]}`)},
	}
	for name, seed := range bad {
		if _, err := eventlog.LoadLog(seed); err == nil {
			t.Errorf("%s: seed accepted", name)
		}
	}
	okHeader := ev(0, "request/header",
		`{"header":{"config":{"provider":"p","model":"m","maxTokens":5},"adapterDefaults":{"maxTokens":true,"temperature":false}},"reason":"initial"}`)
	if _, err := eventlog.LoadLog([]eventlog.Event{okHeader}); err != nil {
		t.Fatal(err)
	}
}

func TestSES13_RequestHeader(t *testing.T) {
	t.Parallel()
	tool := func(n string) llm.ToolSchema { return llm.ToolSchema{Name: n, Parameters: json.RawMessage(`{}`)} }
	cfg := llm.Config{Provider: "p", Model: "m"}
	a := eventlog.ModelHeader{Config: cfg, System: "", Tools: []llm.ToolSchema{}}
	c := a.Canonical()
	if c.System != "" || c.Tools != nil {
		t.Fatalf("canonical = %+v", c)
	}
	b := eventlog.ModelHeader{Config: cfg, AdapterDefaults: map[string]bool{"maxTokens": false}}
	if !a.Equal(b) {
		t.Fatal("headers differing only by empty system/tools and false markers are not equal")
	}
	x := eventlog.ModelHeader{Config: cfg, Tools: []llm.ToolSchema{tool("a"), tool("b")}}
	y := eventlog.ModelHeader{Config: cfg, Tools: []llm.ToolSchema{tool("b"), tool("a")}}
	if x.Equal(y) {
		t.Fatal("tool order is ignored")
	}
	z := eventlog.ModelHeader{Config: cfg, Tools: x.Tools, AdapterDefaults: map[string]bool{"model": true}}
	if x.Equal(z) || x.Equal(eventlog.ModelHeader{Config: cfg, Tools: x.Tools, System: "s"}) {
		t.Fatal("markers or system are ignored")
	}
	half, half2, one := 0.5, 0.5, 1.0
	warm := eventlog.ModelHeader{Config: llm.Config{Provider: "p", Model: "m", Temperature: &half}}
	if !warm.Equal(eventlog.ModelHeader{Config: llm.Config{Provider: "p", Model: "m", Temperature: &half2}}) {
		t.Fatal("equal temperatures differ")
	}
	if warm.Equal(eventlog.ModelHeader{Config: llm.Config{Provider: "p", Model: "m", Temperature: &one}}) ||
		warm.Equal(eventlog.ModelHeader{Config: cfg}) {
		t.Fatal("the temperature is ignored")
	}
	spaced := eventlog.ModelHeader{Config: cfg, Tools: []llm.ToolSchema{{Name: "a", Parameters: json.RawMessage(`{ }`)}, tool("b")}}
	if !x.Equal(spaced) {
		t.Fatal("two spellings of the same parameters differ")
	}
}

func TestSES16_SessionHeader(t *testing.T) {
	t.Parallel()
	n := int64(3)
	h := eventlog.SessionHeader{ID: "s1", CreatedAt: 5, ParentSession: "p", SeedLength: &n, Owner: "t"}
	b, _ := json.Marshal(h)
	if string(b) != `{"version":0,"id":"s1","createdAt":5,"parentSession":"p","seedLength":3,"owner":"t"}` {
		t.Fatalf("header JSON = %s", b)
	}
	for _, bad := range []eventlog.SessionHeader{{ID: "s", Cwd: "rel/dir"}, {ID: "s", Origin: "user"}, {}, {ID: "s", DelegationDepth: -1}} {
		if bad.Validate() == nil {
			t.Errorf("header %+v accepted", bad)
		}
	}
}

func TestEventJSONShape(t *testing.T) {
	t.Parallel()
	cases := []struct {
		ev   eventlog.Event
		want string
	}{
		{eventlog.Event{Type: "turn/start", Seq: 1, Time: 2, Data: json.RawMessage(`{"turn":1}`)},
			`{"type":"turn/start","seq":1,"time":2,"data":{"turn":1}}`},
		{eventlog.Event{Type: "assistant/message", Seq: 3, Time: 4, Data: json.RawMessage(`{}`), SurfaceOp: eventlog.Append, SourceEventSeqs: []int64{}},
			`{"type":"assistant/message","seq":3,"time":4,"data":{},"surfaceOp":"append","sourceEventSeqs":[]}`},
		{eventlog.Event{Type: "user/message", Seq: 5, Time: 6, Data: json.RawMessage(`{}`), SurfaceOp: eventlog.ReplaceOp(1, 2), SourceEventSeqs: []int64{1, 2}},
			`{"type":"user/message","seq":5,"time":6,"data":{},"surfaceOp":{"op":"replace","start":1,"end":2},"sourceEventSeqs":[1,2]}`},
		{eventlog.Event{Type: "x/y", Seq: 7, Time: 8, Data: json.RawMessage(`1`), Ignorable: true},
			`{"type":"x/y","seq":7,"time":8,"data":1,"ignorable":true}`},
	}
	for _, c := range cases {
		b, err := json.Marshal(c.ev)
		if err != nil || string(b) != c.want {
			t.Errorf("marshal = %s, %v; want %s", b, err, c.want)
		}
		var back eventlog.Event
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if b2, _ := json.Marshal(back); string(b2) != c.want {
			t.Errorf("round trip = %s, want %s", b2, c.want)
		}
	}
}

func TestReferenceLogsReplay(t *testing.T) {
	t.Parallel()
	want := map[string]string{
		"text.jsonl":      "m1,m2",
		"tools-4.jsonl":   "m1,m2,m3,m4,m5,m6,m7",
		"code-mode.jsonl": "m1,m2,m3,m4",
	}
	for name, evs := range et.ReferenceLogs(t, "testdata") {
		l, err := eventlog.LoadLog(evs)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		msgs, err := l.DeriveMessages()
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range msgs {
			ids = append(ids, m.ID)
		}
		if strings.Join(ids, ",") != want[name] {
			t.Errorf("%s: derived %v, want %s", name, ids, want[name])
		}
		if c := l.Closers(); c != nil {
			t.Errorf("%s: a balanced log got closers %v", name, c)
		}
		// Re-appending the same events through Append gives the same log.
		again := eventlog.NewLog(nil)
		for _, ev := range evs {
			got := et.MustAppend(t, again, et.AsNew(ev))
			if string(got[0].Data) != string(ev.Data) {
				t.Fatalf("%s seq %d: data changed: %s", name, ev.Seq, got[0].Data)
			}
		}
	}
}

// TestSES14_CloserCancelsPendingApproval: crash repair decides an approval the interrupted call
// waited for as cancelled (E1 extension of SES-14), before the call's result, and leaves decided
// approvals alone.
func TestSES14_CloserCancelsPendingApproval(t *testing.T) {
	t.Parallel()
	l := eventlog.NewLog(nil)
	am := et.AssistantMsg("a1", llm.ToolCallBlock("c1", "bash", `{}`))
	et.MustAppend(t, l, et.TurnStart(1), et.StepStart(1, 1), et.User("u1", "hi"), et.Assistant(1, 1, am), et.ToolCall(1, 1, "c1"),
		eventlog.Of(eventlog.ApprovalAsked{ID: "done", ToolName: "bash", CallID: "c0"}),
		eventlog.Of(eventlog.ApprovalDecided{ID: "done", Outcome: eventlog.ApprovalAllowedOnce}),
		eventlog.Of(eventlog.ApprovalAsked{ID: "ap1", ToolName: "bash", CallID: "c1"}))
	c := l.Closers()
	if len(c) != 4 || c[0].Type != eventlog.TypeApprovalDecided || c[1].Type != eventlog.TypeToolResult {
		t.Fatalf("closers %v", c)
	}
	d, err := eventlog.Decode[eventlog.ApprovalDecided](c[0])
	if err != nil || d.ID != "ap1" || d.Outcome != eventlog.ApprovalCancelled {
		t.Fatalf("decision %+v %v", d, err)
	}
	if err := l.AppendEvents(c...); err != nil {
		t.Fatal(err)
	}
	if err := eventlog.CheckInvariants(l.Events()); err != nil {
		t.Fatal(err)
	}
}
