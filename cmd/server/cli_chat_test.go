package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/creack/pty"
)

// terminal is the program running under a pseudo-terminal.
type terminal struct {
	t      *testing.T
	cmd    *exec.Cmd
	pty    *os.File
	mu     sync.Mutex
	out    []byte
	mark   int // expect looks after this offset
	change chan struct{}
	exited chan error
	// readDone is closed once the terminal's output has been read to its end.
	readDone chan struct{}
}

// startTerminal runs this test binary as dshd with args under a pseudo-terminal (its
// controlling terminal: a Ctrl-C typed is a SIGINT), with the client's environment of env.
func startTerminal(t *testing.T, env func(string) string, args ...string) *terminal {
	t.Helper()
	cmd := dshdCommand(env, args...)
	f, err := pty.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	term := &terminal{t: t, cmd: cmd, pty: f, change: make(chan struct{}, 1), exited: make(chan error, 1), readDone: make(chan struct{})}
	go func() {
		defer close(term.readDone)
		buf := make([]byte, 4096)
		for {
			n, err := f.Read(buf)
			term.mu.Lock()
			term.out = append(term.out, buf[:n]...)
			term.mu.Unlock()
			select {
			case term.change <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}()
	go func() { term.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		f.Close()
		if t.Failed() || testing.Verbose() {
			term.mu.Lock()
			t.Logf("terminal:\n%s", term.out)
			term.mu.Unlock()
		}
	})
	return term
}

// output is what the program printed so far.
func (term *terminal) output() string {
	term.mu.Lock()
	defer term.mu.Unlock()
	return string(term.out)
}

func (term *terminal) expect(want string) {
	term.t.Helper()
	for {
		term.mu.Lock()
		out := string(term.out)
		i := strings.Index(out[term.mark:], want)
		if i >= 0 {
			term.mark += i + len(want)
		}
		term.mu.Unlock()
		if i >= 0 {
			return
		}
		select {
		case <-term.change:
		case err := <-term.exited:
			term.exited <- err
			term.t.Fatalf("dshd chat exited (%v) before printing %q; it printed:\n%s", err, want, out)
		}
	}
}

func (term *terminal) send(s string) {
	term.t.Helper()
	if _, err := term.pty.WriteString(s); err != nil {
		term.t.Fatal(err)
	}
}

// TestCLIChatOverPTY drives `dshd chat` through a pseudo-terminal, as a person would: a line's
// streamed answer, an approval answered y, a running turn cancelled with Ctrl-C, Ctrl-D to exit.
func TestCLIChatOverPTY(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: runs the program under a pseudo-terminal")
	}
	s := newCLIServer(t)
	preset := s.preset(t, `{"name":"ask","model":{"provider":"scripted","model":"m"},"approval":{"policy":"ask","ask":["echo"],"timeoutMs":600000}}`)
	term := startTerminal(t, s.env(s.m.URL()), "chat", "--preset", preset)
	term.expect("Type a message")
	term.expect("> ")
	// The answer streams; the echoed input has %20, the answer a space.
	term.send("say:Hello%20from%20the%20model\r")
	term.expect("Hello from the model")
	term.expect("> ")

	// A call that needs approval: asked y/n, answered y, the call runs and the turn completes.
	term.send(`tool:echo args:{"text":"ping"}` + "\r")
	term.expect(`-> echo {"text":"ping"}`)
	term.expect(`approve echo {"text":"ping"}? [y/N] `)
	term.send("y\r")
	term.expect("approval allowed-once")
	term.expect("<- echo: ping")
	term.expect("Done after 1 steps and 1 tool results.")
	term.expect("> ")

	// A call that waits: Ctrl-C cancels the turn, and the prompt comes back.
	term.send(`tool:sleep args:{"ms":600000,"text":"zz"}` + "\r")
	term.expect("-> sleep")
	term.send("\x03")
	term.expect("cancelling the turn")
	term.expect("<- sleep ABORTED failed")
	term.expect("[turn cancelled]")
	term.expect("> ")

	// Ctrl-D at the prompt exits, successfully.
	term.send("\x04")
	if err := <-term.exited; err != nil {
		t.Fatalf("dshd chat exited with %v", err)
	}
	<-term.readDone

	// The session's log has the three turns, the last one aborted by the user.
	var list struct{ Items []struct{ ID string } }
	s.call(t, "GET", "/v1/sessions", s.key, "", 200, &list)
	if len(list.Items) != 1 {
		t.Fatalf("%d sessions, want the chat's one", len(list.Items))
	}
	var page struct {
		Events []struct{ Data json.RawMessage }
	}
	s.call(t, "GET", "/v1/sessions/"+list.Items[0].ID+"/events?types=turn/end", s.key, "", 200, &page)
	if len(page.Events) != 3 || !strings.Contains(string(page.Events[2].Data), `"aborted"`) {
		t.Fatalf("turn ends %+v, want 3, the last aborted", page.Events)
	}
}

// TestCLIChatResumesADroppedStream continues a session (--session) through a proxy that cuts the
// connection in the middle of a turn's stream: the chat resumes from the session's events with
// Last-Event-ID and shows the rest of the turn, each call and result once. Two Ctrl-C at the
// prompt exit.
func TestCLIChatResumesADroppedStream(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: runs the program under a pseudo-terminal")
	}
	s := newCLIServer(t)
	session := s.session(t, s.preset(t, `{"name":"p","model":{"provider":"scripted","model":"m"}}`))
	proxy := newCuttingProxy(t, strings.TrimPrefix(s.m.URL(), "http://"), 3000)
	term := startTerminal(t, s.env("http://"+proxy.ln.Addr().String()), "chat", "--session", session)
	term.expect("continuing session " + session)
	term.expect("> ")
	term.send("tools:3 say:all%20three%20done\r")
	term.expect("all three done")
	term.expect("> ")
	// Ctrl-C at the prompt warns; a second one exits.
	term.send("\x03")
	term.expect("(Ctrl-C again or Ctrl-D to exit)")
	term.send("\x03")
	if err := <-term.exited; err != nil {
		t.Fatalf("dshd chat exited with %v", err)
	}
	<-term.readDone
	out := term.output()
	if n := proxy.connections(); n < 2 {
		t.Fatalf("%d connections through the proxy: the stream was never cut and resumed", n)
	}
	for _, want := range []string{`-> echo {"text":"step 1 call 1"}`, `-> echo {"text":"step 1 call 3"}`, "<- echo: step 1 call 2", "all three done"} {
		if n := strings.Count(out, want); n != 1 {
			t.Fatalf("%q printed %d times, want once", want, n)
		}
	}
}

// TestCLIChatFromAPipe: lines piped into chat are posted one turn after the other (what is read
// during a turn waits for it, except an approval's answer), and the end of input exits.
func TestCLIChatFromAPipe(t *testing.T) {
	t.Parallel()
	s := newCLIServer(t)
	preset := s.preset(t, `{"name":"ask","model":{"provider":"scripted","model":"m"},"approval":{"policy":"ask","ask":["echo"],"timeoutMs":600000}}`)
	cmd := dshdCommand(s.env(s.m.URL()), "chat", "--preset", preset)
	cmd.Stdin = strings.NewReader("tools:1\ny\nsay:bye%20now\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("dshd chat: %v\n%s", err, out)
	}
	for _, want := range []string{`approve echo {"text":"step 1 call 1"}? [y/N]`, "<- echo: step 1 call 1", "Done after 1 steps and 1 tool results.", "bye now"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("the chat's output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "cancelling") || strings.Contains(string(out), "[turn cancelled]") {
		t.Fatalf("a turn was cancelled:\n%s", out)
	}
}

// TestCLIChatEndsOnSIGTERM: the chat answers Ctrl-C itself, but a termination ends it, cleanly.
func TestCLIChatEndsOnSIGTERM(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: runs the program under a pseudo-terminal")
	}
	s := newCLIServer(t)
	term := startTerminal(t, s.env(s.m.URL()), "chat", "--preset", s.preset(t, `{"name":"p","model":{"provider":"scripted","model":"m"}}`))
	term.expect("> ")
	if err := term.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-term.exited; err != nil {
		t.Fatalf("dshd chat exited with %v after SIGTERM", err)
	}
}
