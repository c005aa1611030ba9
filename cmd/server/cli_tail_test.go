package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
)

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
