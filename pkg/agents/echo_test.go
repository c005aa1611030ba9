package agents_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/agents"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/preset"
)

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Split(strings.TrimSpace(s.b.String()), "\n")
}

// TestFinding11_UnknownToolNamesEchoLittle (issue 9, finding 11): a stored preset naming 20k
// unknown tools (1.1 MB of names) in tools.allow, tools.deny or tools.toolOrder makes every turn
// end with an error, and its setup log a warning, that repeat a few of the names, clipped: the
// whole list made a 1.1 MB log line and a 469 KB error in the log on every turn.
func TestFinding11_UnknownToolNamesEchoLittle(t *testing.T) {
	t.Parallel()
	ghosts := make([]string, 20000)
	for i := range ghosts {
		ghosts[i] = fmt.Sprintf("ghost_%d_%s", i, strings.Repeat("x", 48))
	}
	var logs syncBuffer
	a := newAgentsWith(t, func(c *agents.Config) { c.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) })
	for name, edit := range map[string]func(*preset.Body){
		"allow":     func(b *preset.Body) { b.Tools.Allow = ghosts },
		"deny":      func(b *preset.Body) { b.Tools.Deny = ghosts },
		"toolOrder": func(b *preset.Body) { b.Tools.ToolOrder = append(ghosts, preset.UnlistedTools) },
	} {
		p := presetOf(t, `{"name":"p","model":{"provider":"scripted","model":"m"}}`)
		edit(&p.Body)
		ends := find(run(t, a, p, "hello"), eventlog.TypeTurnEnd)
		if len(ends) != 1 || !strings.Contains(ends[0], `"kind":"error"`) || !strings.Contains(ends[0], "ghost_0_") ||
			!strings.Contains(ends[0], "more") {
			t.Fatalf("%s: turn/end %.500s", name, ends)
		}
		if n := len(ends[0]); n > 2048 {
			t.Fatalf("%s: turn/end is %d bytes: %.500s", name, n, ends[0])
		}
		_, err := a.Prompt(context.Background(), agents.Session{ID: uuid.New(), Preset: p})
		if err == nil || len(err.Error()) > 2048 {
			t.Fatalf("%s: prompt error of %d bytes", name, len(fmt.Sprint(err)))
		}
	}
	for _, line := range logs.lines() {
		if len(line) > 2048 {
			t.Fatalf("a log line of %d bytes: %.500s", len(line), line)
		}
	}
}
