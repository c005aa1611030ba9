package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
)

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// text joins the text blocks of blocks.
func text(blocks []llm.Block) string {
	var b strings.Builder
	for _, c := range blocks {
		if c.Type == llm.BlockText {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

// short is s on one line, cut to n runes.
func short(s string, n int) string {
	return cut(strings.Join(strings.Fields(s), " "), n)
}

// cut is s cut to n runes.
func cut(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// toolResult is the text and error flag of a tool/result event.
func toolResult(ev Event) (callID, body string, isError bool, code string) {
	m, err := eventlog.Decode[eventlog.ToolResult](ev.Event)
	if err != nil {
		return "", "", false, ""
	}
	for _, c := range m.Message.Content {
		if c.Type == llm.BlockToolResult {
			callID, body, isError = c.ToolCallID, text(c.Content), c.IsError
		}
	}
	if m.Error != nil {
		code = m.Error.Code
	}
	return callID, body, isError, code
}

// turnEndText says how a turn ended, "" for a completed one.
func turnEndText(ev Event) string {
	t, _ := eventlog.Decode[eventlog.TurnEnd](ev.Event)
	switch r := t.Reason; r.Kind {
	case "completed":
		return ""
	case "aborted":
		if r.Reason != nil && r.Reason.Kind == "user" {
			return "turn cancelled"
		}
		return "turn aborted"
	case "error":
		if r.Error != nil {
			return "turn failed: " + r.Error.Code + ": " + r.Error.Message
		}
		return "turn failed"
	default:
		return "turn ended: " + r.Kind
	}
}

// Line is the one-line human summary of an event, for `dshd tail`.
func Line(ev Event) string {
	ts := time.UnixMilli(ev.Time).Format("15:04:05.000")
	return fmt.Sprintf("%5d %s %-20s %s", ev.Seq, ts, ev.Type, summary(ev))
}

func summary(ev Event) string {
	switch ev.Type {
	case eventlog.TypeUserMessage:
		m, _ := eventlog.Decode[eventlog.UserMessage](ev.Event)
		return short(text(m.Content), 120)
	case eventlog.TypeAssistantChunk:
		c, err := eventlog.Decode[eventlog.AssistantChunk](ev.Event)
		if err != nil || c.Chunk == nil {
			return ""
		}
		switch ch := c.Chunk; ch.Type {
		case "text-delta", "reasoning-delta":
			return ch.Type + " " + fmt.Sprintf("%q", cut(ch.Text, 100))
		case "tool-call-delta":
			return ch.Type + " " + ch.Name + " " + short(deref(ch.ArgumentsDelta), 80)
		case "block-start":
			return ch.Type + " " + ch.BlockType
		case "usage":
			if ch.Usage == nil {
				return ch.Type
			}
			return fmt.Sprintf("usage in %d out %d", ch.Usage.InputTokens, ch.Usage.OutputTokens)
		case "finish":
			if ch.Reason == nil {
				return ch.Type
			}
			return ch.Type + " " + ch.Reason.Kind
		default:
			return ch.Type
		}
	case eventlog.TypeAssistantMessage:
		m, _ := eventlog.Decode[eventlog.AssistantMessage](ev.Event)
		var calls []string
		for _, c := range m.Message.ToolCalls() {
			calls = append(calls, c.Name)
		}
		s := short(text(m.Message.Content), 100)
		if len(calls) > 0 {
			s = strings.TrimSpace(s + " [calls " + strings.Join(calls, ", ") + "]")
		}
		return s
	case eventlog.TypeRequestHeader:
		h, _ := eventlog.Decode[eventlog.RequestHeader](ev.Event)
		return fmt.Sprintf("%s %s/%s, %d tools", h.Reason, h.Header.Config.Provider, h.Header.Config.Model, len(h.Header.Tools))
	case eventlog.TypeToolCall:
		c, _ := eventlog.Decode[eventlog.ToolCall](ev.Event)
		return c.CallID + " " + c.Name + " " + short(c.Arguments, 100)
	case eventlog.TypeToolResult:
		id, body, isErr, code := toolResult(ev)
		status := "ok"
		if isErr {
			status = "error"
			if code != "" {
				status += " " + code
			}
		}
		return id + " " + status + ": " + short(body, 100)
	case eventlog.TypeTurnStart:
		t, _ := eventlog.Decode[eventlog.TurnStart](ev.Event)
		return fmt.Sprintf("turn %d", t.Turn)
	case eventlog.TypeStepStart:
		t, _ := eventlog.Decode[eventlog.StepStart](ev.Event)
		return fmt.Sprintf("turn %d step %d", t.Turn, t.Step)
	case eventlog.TypeStepEnd:
		t, _ := eventlog.Decode[eventlog.StepEnd](ev.Event)
		return fmt.Sprintf("turn %d step %d", t.Turn, t.Step)
	case eventlog.TypeTurnEnd:
		t, _ := eventlog.Decode[eventlog.TurnEnd](ev.Event)
		s := fmt.Sprintf("turn %d %s", t.Turn, t.Reason.Kind)
		if e := t.Reason.Error; e != nil {
			s += " " + e.Code + ": " + short(e.Message, 80)
		}
		return s
	case eventlog.TypeApprovalAsked:
		a, _ := eventlog.Decode[eventlog.ApprovalAsked](ev.Event)
		return a.ToolName + " " + a.CallID + " approval " + a.ID
	case eventlog.TypeApprovalDecided:
		a, _ := eventlog.Decode[eventlog.ApprovalDecided](ev.Event)
		return a.ID + " " + a.Outcome
	}
	return short(string(ev.Event.Data), 120)
}
