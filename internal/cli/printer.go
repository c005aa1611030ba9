package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/dshd/dshd/pkg/eventlog"
)

// streamPrinter shows a turn as a person reads it: the answer's text as it streams, reasoning
// set apart, tool calls and results on one line each, how the turn ended when it did not
// complete. It is the chat's view.
type streamPrinter struct {
	w        io.Writer
	midLn    bool            // the last write did not end a line
	block    string          // the kind of block being streamed: "text", "reasoning" or ""
	streamed map[[2]int]bool // steps whose text was shown from deltas
	calls    map[string]eventlog.ToolCall
}

func newStreamPrinter(w io.Writer) *streamPrinter {
	return &streamPrinter{w: w, streamed: map[[2]int]bool{}, calls: map[string]eventlog.ToolCall{}}
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
	case eventlog.TypeAssistantChunk:
		c, err := eventlog.Decode[eventlog.AssistantChunk](ev.Event)
		if err != nil || c.Chunk == nil {
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
	case eventlog.TypeAssistantMessage:
		m, err := eventlog.Decode[eventlog.AssistantMessage](ev.Event)
		if err == nil && !p.streamed[[2]int{m.Turn, m.Step}] {
			if s := text(m.Message.Content); s != "" {
				p.line("%s", s)
			}
		}
	case eventlog.TypeToolCall:
		c, err := eventlog.Decode[eventlog.ToolCall](ev.Event)
		if err != nil {
			return
		}
		p.calls[c.CallID] = c
		p.line("-> %s %s", c.Name, short(c.Arguments, 160))
	case eventlog.TypeToolResult:
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
	case eventlog.TypeApprovalDecided:
		a, _ := eventlog.Decode[eventlog.ApprovalDecided](ev.Event)
		p.line("   approval %s", a.Outcome)
	case eventlog.TypeTurnEnd:
		if s := turnEndText(ev); s != "" {
			p.line("[%s]", s)
		}
		p.endLine()
	}
}
