package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/dshd/dshd/pkg/eventlog"
)

// runChat is `dshd chat [--preset ID | --session ID]`: an interactive session. Each line read
// is posted as a message and its turn streamed; approvals are asked y/n; Ctrl-C cancels the
// running turn; at the prompt a second Ctrl-C, or Ctrl-D, exits.
func runChat(ctx context.Context, args []string, env Env) error {
	fs := newFlagSet("chat", env)
	var cf clientFlags
	cf.add(fs)
	presetID := fs.String("preset", "", "create a session of this preset (default $DSHD_PRESET_ID)")
	sessionID := fs.String("session", "", "continue this session")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 || (*presetID != "" && *sessionID != "") {
		return errors.New("usage: dshd chat [--preset ID | --session ID] [--url URL] [--key KEY]")
	}
	c, err := cf.connect(env)
	if err != nil {
		return err
	}
	ch := &chat{c: c, out: env.Stdout, lines: readLines(env.Stdin)}
	if *sessionID != "" {
		var s sessionItem
		if err := c.Do(ctx, "GET", "/v1/sessions/"+url.PathEscape(*sessionID), nil, &s); err != nil {
			return err
		}
		ch.session, ch.lastSeq = s.ID, s.LastSeq
		fmt.Fprintf(env.Stdout, "continuing session %s\n", s.ID)
	} else {
		p := *presetID
		if p == "" {
			p = env.Getenv("DSHD_PRESET_ID")
		}
		if p == "" {
			return errors.New("chat: pass --preset ID or --session ID (or set DSHD_PRESET_ID)")
		}
		var s sessionItem
		if err := c.Do(ctx, "POST", "/v1/sessions", map[string]string{"presetId": p}, &s); err != nil {
			return err
		}
		ch.session, ch.lastSeq = s.ID, s.LastSeq
		fmt.Fprintf(env.Stdout, "session %s\n", s.ID)
	}
	fmt.Fprintln(env.Stdout, "Type a message. Ctrl-C cancels a running turn; Ctrl-D (or Ctrl-C twice) at the prompt exits.")
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt)
	defer signal.Stop(sigs)
	ch.interrupts = sigs
	// The caller's ctx does not end with an interrupt (that is the chat's to answer); a
	// termination or a closed terminal ends the chat, leaving a running turn to the server.
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	return ch.run(ctx)
}

// readLines sends the lines of r, and closes the channel at its end.
func readLines(r io.Reader) <-chan string {
	out := make(chan string)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			out <- sc.Text()
		}
	}()
	return out
}

type chat struct {
	c          *Client
	session    string
	out        io.Writer
	lines      <-chan string
	interrupts <-chan os.Signal
	// lastSeq is the last event of the session the chat knows of: a turn's stream that drops
	// before its first event resumes after it.
	lastSeq int64
}

const prompt = "> "

func (ch *chat) run(ctx context.Context) error {
	armed := false // a Ctrl-C at the prompt: the next one exits
	for {
		fmt.Fprint(ch.out, prompt)
		select {
		case <-ctx.Done():
			fmt.Fprintln(ch.out)
			return nil
		case <-ch.interrupts:
			if armed {
				fmt.Fprintln(ch.out)
				return nil
			}
			armed = true
			fmt.Fprintln(ch.out, "\n(Ctrl-C again or Ctrl-D to exit)")
		case line, ok := <-ch.lines:
			if !ok {
				fmt.Fprintln(ch.out)
				return nil
			}
			armed = false
			if strings.TrimSpace(line) == "" {
				continue
			}
			exit, err := ch.turn(ctx, line)
			if err != nil {
				fmt.Fprintln(ch.out, "error:", err)
			}
			if exit {
				return nil
			}
		}
	}
}

// item is what the stream reader hands the chat: an event, or the end of the turn's stream.
type item struct {
	ev  Event
	err error // io.EOF when the turn's stream ended after its turn
}

// turn posts line and shows its turn; exit is true when the person asked to leave during it.
func (ch *chat) turn(ctx context.Context, line string) (exit bool, err error) {
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, err := ch.c.Stream(tctx, "POST", "/v1/sessions/"+url.PathEscape(ch.session)+"/messages",
		map[string]string{"content": line}, "")
	if err != nil {
		return false, err
	}
	items := make(chan item, 64)
	go ch.read(tctx, resp.Body, ch.lastSeq, items)
	p := newStreamPrinter(ch.out)
	defer p.endLine()
	var queue []eventlog.ApprovalAsked // approvals asked and not answered yet, in order
	asking := false
	cancelled := false
	for {
		if len(queue) > 0 && !asking {
			a := queue[0]
			args := p.calls[a.CallID].Arguments
			p.endLine()
			fmt.Fprintf(ch.out, "approve %s %s? [y/N] ", a.ToolName, short(args, 160))
			asking = true
		}
		// Lines are read only to answer an approval: what is typed during a turn waits for the
		// next prompt (and an end of input, for the prompt to exit at).
		var lines <-chan string
		if asking {
			lines = ch.lines
		}
		select {
		case <-ctx.Done():
			return true, nil
		case it := <-items:
			if it.err != nil {
				if errors.Is(it.err, io.EOF) {
					return false, nil
				}
				return false, it.err
			}
			switch it.ev.Type {
			case eventlog.TypeApprovalAsked:
				if a, err := eventlog.Decode[eventlog.ApprovalAsked](it.ev.Event); err == nil {
					queue = append(queue, a)
				}
			case eventlog.TypeApprovalDecided:
				d, _ := eventlog.Decode[eventlog.ApprovalDecided](it.ev.Event)
				var first bool
				if queue, first = removeApproval(queue, d.ID); first && asking {
					asking = false // answered elsewhere, or timed out
					fmt.Fprintln(ch.out)
				}
			}
			ch.lastSeq = it.ev.Seq
			p.Show(it.ev)
		case line, ok := <-lines:
			if !ok {
				fmt.Fprintln(ch.out)
				line = "n" // the end of input: nobody is left to approve
			}
			ch.answer(ctx, p, queue[0].ID, line)
			queue, asking = queue[1:], false
		case <-ch.interrupts:
			if cancelled {
				return true, nil // a second Ctrl-C: leave at once
			}
			cancelled = true
			p.line("(cancelling the turn; Ctrl-C again exits)")
			if err := ch.cancel(ctx); err != nil {
				return false, err
			}
		}
	}
}

func (ch *chat) cancel(ctx context.Context) error {
	return ch.c.Do(ctx, "POST", "/v1/sessions/"+url.PathEscape(ch.session)+"/cancel", nil, nil)
}

// answer records the person's answer to approval id: y or yes allows the one call, anything
// else rejects it.
func (ch *chat) answer(ctx context.Context, p *streamPrinter, id, line string) {
	outcome := "rejected"
	if s := strings.ToLower(strings.TrimSpace(line)); s == "y" || s == "yes" {
		outcome = "allowed-once"
	}
	if err := ch.c.Do(ctx, "POST", "/v1/sessions/"+url.PathEscape(ch.session)+"/approvals/"+url.PathEscape(id),
		map[string]string{"outcome": outcome}, nil); err != nil {
		p.line("approval not recorded: %v", err)
	}
}

// removeApproval removes approval id from queue; first tells whether it was the first one.
func removeApproval(queue []eventlog.ApprovalAsked, id string) (_ []eventlog.ApprovalAsked, first bool) {
	for i, a := range queue {
		if a.ID == id {
			return append(queue[:i], queue[i+1:]...), i == 0
		}
	}
	return queue, false
}
