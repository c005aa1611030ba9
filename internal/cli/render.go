package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// The payload fields the renderers read (docs/events.md); everything else is left alone.
type (
	contentBlock struct {
		Type      string         `json:"type"`
		Text      string         `json:"text"`
		ID        string         `json:"id"`
		Name      string         `json:"name"`
		Arguments string         `json:"arguments"`
		Content   []contentBlock `json:"content"` // a tool-result block's
		IsError   bool           `json:"isError"`
		ToolCall  string         `json:"toolCallId"`
	}
	message struct {
		Role    string         `json:"role"`
		Content []contentBlock `json:"content"`
		Source  struct {
			Kind string `json:"kind"`
		} `json:"source"`
	}
	chunkData struct {
		Turn  int `json:"turn"`
		Step  int `json:"step"`
		Chunk struct {
			Type           string `json:"type"`
			BlockType      string `json:"blockType"`
			Text           string `json:"text"`
			Name           string `json:"name"`
			ArgumentsDelta string `json:"argumentsDelta"`
			Reason         struct {
				Kind string `json:"kind"`
			} `json:"reason"`
		} `json:"chunk"`
	}
	stepMessage struct {
		Turn    int     `json:"turn"`
		Step    int     `json:"step"`
		Message message `json:"message"`
		Error   *struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	toolCall struct {
		CallID    string `json:"callId"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	turnEnd struct {
		Turn   int `json:"turn"`
		Reason struct {
			Kind   string `json:"kind"`
			Reason *struct {
				Kind string `json:"kind"`
			} `json:"reason"`
			Error *struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		} `json:"reason"`
	}
	approvalAsked struct {
		ID       string `json:"id"`
		ToolName string `json:"toolName"`
		CallID   string `json:"callId"`
		Reason   string `json:"reason"`
	}
	approvalDecided struct {
		ID      string `json:"id"`
		Outcome string `json:"outcome"`
	}
)

func decode[T any](ev Event) (T, bool) {
	var v T
	err := json.Unmarshal(ev.Data, &v)
	return v, err == nil
}

// text joins the text blocks of blocks.
func text(blocks []contentBlock) string {
	var b strings.Builder
	for _, c := range blocks {
		if c.Type == "text" {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

// short is s on one line, cut to n runes.
func short(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// toolResult is the text and error flag of a tool/result event.
func toolResult(ev Event) (callID, body string, isError bool, code string) {
	m, ok := decode[stepMessage](ev)
	if !ok {
		return "", "", false, ""
	}
	for _, c := range m.Message.Content {
		if c.Type == "tool-result" {
			callID, body, isError = c.ToolCall, text(c.Content), c.IsError
		}
	}
	if m.Error != nil {
		code = m.Error.Code
	}
	return callID, body, isError, code
}

// turnEndText says how a turn ended, "" for a completed one.
func turnEndText(ev Event) string {
	t, _ := decode[turnEnd](ev)
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
	case "user/message":
		m, _ := decode[message](ev)
		return short(text(m.Content), 120)
	case "assistant/chunk":
		c, _ := decode[chunkData](ev)
		switch ch := c.Chunk; ch.Type {
		case "text-delta", "reasoning-delta":
			return ch.Type + " " + fmt.Sprintf("%q", short(ch.Text, 100))
		case "tool-call-delta":
			return ch.Type + " " + ch.Name + " " + short(ch.ArgumentsDelta, 80)
		case "block-start":
			return ch.Type + " " + ch.BlockType
		case "finish":
			return ch.Type + " " + ch.Reason.Kind
		default:
			return ch.Type
		}
	case "assistant/message":
		m, _ := decode[stepMessage](ev)
		var calls []string
		for _, c := range m.Message.Content {
			if c.Type == "tool-call" {
				calls = append(calls, c.Name)
			}
		}
		s := short(text(m.Message.Content), 100)
		if len(calls) > 0 {
			s = strings.TrimSpace(s + " [calls " + strings.Join(calls, ", ") + "]")
		}
		return s
	case "tool/call":
		c, _ := decode[toolCall](ev)
		return c.CallID + " " + c.Name + " " + short(c.Arguments, 100)
	case "tool/result":
		id, body, isErr, code := toolResult(ev)
		status := "ok"
		if isErr {
			status = "error"
			if code != "" {
				status += " " + code
			}
		}
		return id + " " + status + ": " + short(body, 100)
	case "turn/start", "step/start", "step/end":
		var t struct{ Turn, Step int }
		_ = json.Unmarshal(ev.Data, &t)
		if ev.Type == "turn/start" {
			return fmt.Sprintf("turn %d", t.Turn)
		}
		return fmt.Sprintf("turn %d step %d", t.Turn, t.Step)
	case "turn/end":
		t, _ := decode[turnEnd](ev)
		s := fmt.Sprintf("turn %d %s", t.Turn, t.Reason.Kind)
		if e := t.Reason.Error; e != nil {
			s += " " + e.Code + ": " + short(e.Message, 80)
		}
		return s
	case "approval/asked":
		a, _ := decode[approvalAsked](ev)
		return a.ToolName + " " + a.CallID + " approval " + a.ID
	case "approval/decided":
		a, _ := decode[approvalDecided](ev)
		return a.ID + " " + a.Outcome
	}
	return short(string(ev.Data), 120)
}

// streamPrinter shows a turn as a person reads it: the answer's text as it streams, reasoning
// set apart, tool calls and results on one line each, how the turn ended when it did not
// complete. It is the chat's view.
type streamPrinter struct {
	w        io.Writer
	midLn    bool            // the last write did not end a line
	block    string          // the kind of block being streamed: "text", "reasoning" or ""
	streamed map[[2]int]bool // steps whose text was shown from deltas
	calls    map[string]toolCall
}

func newStreamPrinter(w io.Writer) *streamPrinter {
	return &streamPrinter{w: w, streamed: map[[2]int]bool{}, calls: map[string]toolCall{}}
}

func (p *streamPrinter) endLine() {
	if p.midLn {
		fmt.Fprintln(p.w)
		p.midLn = false
	}
	p.block = ""
}

func (p *streamPrinter) line(format string, args ...any) {
	p.endLine()
	fmt.Fprintf(p.w, format+"\n", args...)
}

// Show prints ev.
func (p *streamPrinter) Show(ev Event) {
	switch ev.Type {
	case "assistant/chunk":
		c, ok := decode[chunkData](ev)
		if !ok {
			return
		}
		switch ch := c.Chunk; ch.Type {
		case "text-delta", "reasoning-delta":
			kind := strings.TrimSuffix(ch.Type, "-delta")
			if p.block != kind {
				p.endLine()
				if kind == "reasoning" {
					fmt.Fprint(p.w, "(thinking) ")
				}
				p.block = kind
			}
			fmt.Fprint(p.w, ch.Text)
			p.midLn = !strings.HasSuffix(ch.Text, "\n")
			p.streamed[[2]int{c.Turn, c.Step}] = true
		case "block-end":
			p.endLine()
		}
	case "assistant/message":
		m, ok := decode[stepMessage](ev)
		if ok && !p.streamed[[2]int{m.Turn, m.Step}] {
			if s := text(m.Message.Content); s != "" {
				p.line("%s", s)
			}
		}
	case "tool/call":
		c, ok := decode[toolCall](ev)
		if !ok {
			return
		}
		p.calls[c.CallID] = c
		p.line("-> %s %s", c.Name, short(c.Arguments, 160))
	case "tool/result":
		id, body, isErr, code := toolResult(ev)
		name := p.calls[id].Name
		if name == "" {
			name = id
		}
		if isErr {
			if code != "" {
				name += " " + code
			}
			p.line("<- %s failed: %s", name, short(body, 200))
			return
		}
		p.line("<- %s: %s", name, short(body, 200))
	case "approval/decided":
		a, _ := decode[approvalDecided](ev)
		p.line("   approval %s", a.Outcome)
	case "turn/end":
		if s := turnEndText(ev); s != "" {
			p.line("[%s]", s)
		}
		p.endLine()
	}
}
