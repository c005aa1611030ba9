package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/creack/pty"
)

// TestCLIHelperProcess is not a test: the chat tests run this test binary as dshd with
// -test.run=^TestCLIHelperProcess$ and DSHD_TEST_RUN_MAIN=1, the program's arguments after "--".
func TestCLIHelperProcess(t *testing.T) {
	if os.Getenv("DSHD_TEST_RUN_MAIN") != "1" {
		return
	}
	for i, a := range os.Args {
		if a == "--" {
			os.Args = append([]string{os.Args[0]}, os.Args[i+1:]...)
			break
		}
	}
	main() // exits 1 on an error
	os.Exit(0)
}

// dshdCommand is the command that runs this test binary as dshd with args.
func dshdCommand(env func(string) string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^TestCLIHelperProcess$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), "DSHD_TEST_RUN_MAIN=1", "DSHD_URL="+env("DSHD_URL"), "DSHD_API_KEY="+env("DSHD_API_KEY"))
	return cmd
}

// cliServer is a real server over a fresh database, with a tenant whose key the client uses.
type cliServer struct {
	m   *Main
	key string
}

func newCLIServer(t *testing.T) *cliServer {
	t.Helper()
	m := newTestMain(t)
	s := &cliServer{m: m}
	var tenant struct{ APIKey string }
	s.call(t, "POST", "/v1/tenants", "admin", `{"name":"cli"}`, 201, &tenant)
	s.key = tenant.APIKey
	return s
}

func (s *cliServer) call(t *testing.T, method, path, key, body string, want int, out any) {
	t.Helper()
	req, _ := http.NewRequest(method, s.m.URL()+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, b, want)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatal(err)
		}
	}
}

// preset creates a preset of the in-process scripted model and returns its id.
func (s *cliServer) preset(t *testing.T, body string) string {
	t.Helper()
	var p struct{ ID string }
	s.call(t, "POST", "/v1/presets", s.key, body, 201, &p)
	return p.ID
}

func (s *cliServer) session(t *testing.T, preset string) string {
	t.Helper()
	var sess struct{ ID string }
	s.call(t, "POST", "/v1/sessions", s.key, `{"presetId":"`+preset+`"}`, 201, &sess)
	return sess.ID
}

// env is the client's environment, as ./.data/dev.env and the Makefile give it, pointed at url.
func (s *cliServer) env(url string) func(string) string {
	return func(name string) string {
		switch name {
		case "DSHD_URL":
			return url
		case "DSHD_API_KEY":
			return s.key
		}
		return ""
	}
}

// cli runs a client command in process and returns what it printed.
func (s *cliServer) cli(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(t.Context(), args, s.env(s.m.URL()), &out, &errOut)
	if strings.Contains(out.String()+errOut.String(), s.key) {
		t.Fatalf("dshd %v printed the API key", args)
	}
	return out.String(), err
}

func TestCLIVersion(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := run(t.Context(), []string{"version"}, func(string) string { return "" }, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.HasPrefix(got, "dshd ") || !strings.Contains(got, runtime.Version()) {
		t.Fatalf("version printed %q, want dshd <version> ... %s", got, runtime.Version())
	}
}

func TestCLISessionsAndPresets(t *testing.T) {
	t.Parallel()
	s := newCLIServer(t)
	file := filepath.Join(t.TempDir(), "preset.json")
	if err := os.WriteFile(file, []byte(`{"name":"from-file","model":{"provider":"scripted","model":"m"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := s.cli(t, "presets", "create", "-f", file)
	if err != nil || !strings.HasPrefix(out, "created preset ") {
		t.Fatalf("presets create: %q %v", out, err)
	}
	preset := strings.Fields(out)[2]
	if out, err = s.cli(t, "presets"); err != nil || !strings.Contains(out, preset) || !strings.Contains(out, "from-file") || !strings.Contains(out, "scripted/m") {
		t.Fatalf("presets list: %q %v", out, err)
	}
	out, err = s.cli(t, "presets", "show", preset)
	var p struct{ ID, Name string }
	if err != nil || json.Unmarshal([]byte(out), &p) != nil || p.ID != preset || p.Name != "from-file" {
		t.Fatalf("presets show: %q %v", out, err)
	}
	// An invalid preset is refused with the server's problem, printed as code: detail.
	bad := filepath.Join(t.TempDir(), "bad.json")
	_ = os.WriteFile(bad, []byte(`{"name":"x","model":{"provider":"nope","model":"m"}}`), 0o600)
	if _, err = s.cli(t, "presets", "create", "-f", bad); err == nil || !strings.HasPrefix(err.Error(), "invalid_request: ") {
		t.Fatalf("presets create of an invalid preset: %v, want invalid_request: <detail>", err)
	}

	session := s.session(t, preset)
	if out, err = s.cli(t, "sessions", "list"); err != nil || !strings.Contains(out, session) || !strings.Contains(out, preset+" v1") {
		t.Fatalf("sessions list: %q %v", out, err)
	}
	out, err = s.cli(t, "sessions", "--json")
	var item struct{ ID string }
	if err != nil || json.Unmarshal([]byte(strings.TrimSpace(out)), &item) != nil || item.ID != session {
		t.Fatalf("sessions --json: %q %v", out, err)
	}
	out, err = s.cli(t, "sessions", "show", session)
	var got struct {
		ID      string
		LastSeq int64
	}
	if err != nil || json.Unmarshal([]byte(out), &got) != nil || got.ID != session || got.LastSeq != -1 {
		t.Fatalf("sessions show: %q %v", out, err)
	}
	if _, err = s.cli(t, "sessions", "show", "8f6f1c1e-0000-4000-8000-000000000000"); err == nil || !strings.HasPrefix(err.Error(), "not_found: ") {
		t.Fatalf("sessions show of an unknown session: %v, want not_found: <detail>", err)
	}
	// A wrong key: the server's problem, and the key is not printed.
	var errOut bytes.Buffer
	err = run(t.Context(), []string{"sessions", "--key", "dshd_wrong-key-value"}, s.env(s.m.URL()), io.Discard, &errOut)
	if err == nil || !strings.HasPrefix(err.Error(), "unauthorized: ") || strings.Contains(err.Error()+errOut.String(), "wrong-key-value") {
		t.Fatalf("sessions with a wrong key: %v", err)
	}
	if err = run(t.Context(), []string{"sessions"}, func(string) string { return "" }, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "DSHD_API_KEY") {
		t.Fatalf("sessions without a key: %v", err)
	}
}

// lines collects what a command writes, line by line, and tells a waiter of each new one.
type lines struct {
	mu      sync.Mutex
	partial []byte
	done    []string
	changed chan struct{}
}

func newLines() *lines { return &lines{changed: make(chan struct{}, 1)} }

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.done = append(l.done, string(l.partial[:i]))
		l.partial = l.partial[i+1:]
	}
	l.mu.Unlock()
	select {
	case l.changed <- struct{}{}:
	default:
	}
	return len(p), nil
}

// waitLine waits until a line contains want (or the command ended: exited) and returns all lines.
func (l *lines) waitLine(t *testing.T, want string, exited <-chan error) []string {
	t.Helper()
	for {
		l.mu.Lock()
		all := append([]string(nil), l.done...)
		l.mu.Unlock()
		for _, s := range all {
			if strings.Contains(s, want) {
				return all
			}
		}
		select {
		case <-l.changed:
		case err := <-exited:
			t.Fatalf("the command ended (%v) before a line with %q:\n%s", err, want, strings.Join(all, "\n"))
		}
	}
}

// cuttingProxy forwards TCP connections to target; it cuts the first one after cut bytes of the
// server's answer, as a dropped connection would.
type cuttingProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns int
}

func newCuttingProxy(t *testing.T, target string, cut int64) *cuttingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cuttingProxy{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			p.conns++
			first := p.conns == 1
			p.mu.Unlock()
			go p.forward(c, target, first, cut)
		}
	}()
	return p
}

func (p *cuttingProxy) forward(c net.Conn, target string, cutIt bool, cut int64) {
	defer c.Close()
	up, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer up.Close()
	go func() { _, _ = io.Copy(up, c); up.Close() }()
	if cutIt {
		_, _ = io.CopyN(c, up, cut)
		return
	}
	_, _ = io.Copy(c, up)
}

func (p *cuttingProxy) connections() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conns
}

// TestCLITailResumesAcrossDroppedConnection follows a turn with tool calls through a proxy that
// cuts the first stream: tail resumes with Last-Event-ID, and its --json lines are every event of
// the session once, in order.
func TestCLITailResumesAcrossDroppedConnection(t *testing.T) {
	t.Parallel()
	s := newCLIServer(t)
	session := s.session(t, s.preset(t, `{"name":"p","model":{"provider":"scripted","model":"m"}}`))
	proxy := newCuttingProxy(t, strings.TrimPrefix(s.m.URL(), "http://"), 2500)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out := newLines()
	exited := make(chan error, 1)
	go func() {
		exited <- run(ctx, []string{"tail", session, "--json"}, s.env("http://"+proxy.ln.Addr().String()), out, io.Discard)
	}()
	s.call(t, "POST", "/v1/sessions/"+session+"/messages", s.key, `{"content":"tools:2"}`, 202, nil)
	got := out.waitLine(t, `"type":"turn/end"`, exited)
	cancel()
	if err := <-exited; err != nil {
		t.Fatalf("tail ended with %v", err)
	}
	kinds := map[string]int{}
	for i, line := range got {
		var ev struct {
			Type string
			Seq  int64
			Data json.RawMessage
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("line %d is not an event: %q", i, line)
		}
		if ev.Seq != int64(i) {
			t.Fatalf("line %d is seq %d: an event is missing or repeated\n%s", i, ev.Seq, strings.Join(got, "\n"))
		}
		kinds[ev.Type]++
	}
	if kinds["tool/call"] != 2 || kinds["tool/result"] != 2 || kinds["turn/end"] != 1 {
		t.Fatalf("events by kind %v, want 2 tool calls, 2 results, 1 turn end", kinds)
	}
	if n := proxy.connections(); n < 2 {
		t.Fatalf("%d connections through the proxy: the stream was never cut and resumed", n)
	}

	// The human view of the same log, from seq 3: one line per event.
	ctx2, cancel2 := context.WithCancel(t.Context())
	defer cancel2()
	human := newLines()
	exited2 := make(chan error, 1)
	go func() {
		exited2 <- run(ctx2, []string{"tail", "--from", "3", session}, s.env(s.m.URL()), human, io.Discard)
	}()
	all := human.waitLine(t, "turn/end", exited2)
	cancel2()
	<-exited2
	if len(all) != len(got)-3 || !strings.HasPrefix(strings.TrimSpace(all[0]), "3 ") {
		t.Fatalf("tail --from 3 printed %d lines from %q, want %d from seq 3", len(all), all[0], len(got)-3)
	}
	text := strings.Join(all, "\n")
	if testing.Verbose() {
		t.Logf("dshd tail --from 3:\n%s", text)
	}
	for _, want := range []string{"tool/call", "call_1_1 echo", "tool/result", "call_1_1 ok: step 1 call 1", "turn 1 completed"} {
		if !strings.Contains(text, want) {
			t.Fatalf("tail's lines lack %q:\n%s", want, text)
		}
	}
}

// terminal is the program running under a pseudo-terminal.
type terminal struct {
	t      *testing.T
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
	term := &terminal{t: t, pty: f, change: make(chan struct{}, 1), exited: make(chan error, 1), readDone: make(chan struct{})}
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
