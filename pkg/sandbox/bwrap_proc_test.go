package sandbox_test

import (
	"strings"
	"testing"

	"github.com/dshd/dshd/pkg/sandbox"
)

// TestBwrapCmdlineShowsNoHostPath (issue 17, finding 5: inside the sandbox /proc/1/cmdline
// showed the launcher's arguments, among them the host path of the workspace root and the
// session's directory): every /proc/*/cmdline inside names neither, since bubblewrap reads its
// options from a pipe (--args).
func TestBwrapCmdlineShowsNoHostPath(t *testing.T) {
	t.Parallel()
	b := bwrapOrSkip(t)
	w := workspaces(t, ownerOf(b))
	const id = "cmdline-probe-session"
	ws := open(t, w, id)
	res := runOK(t, b, sandbox.Spec{Workspace: ws.Dir, Command: `for f in /proc/[0-9]*/cmdline; do echo "$f: $(tr '\0' ' ' < "$f")"; done`})
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "/proc/1/cmdline: ") {
		t.Fatalf("the cmdlines inside: %+v", res)
	}
	for _, host := range []string{w.Root(), ws.Dir, id} {
		if strings.Contains(res.Stdout, host) {
			t.Errorf("a cmdline inside shows the host path %s:\n%s", host, res.Stdout)
		}
	}
}

// TestBwrapCommandsRunAtLowerPriority (issue 17, finding 4: sandboxed commands shared the
// server's CPU at its own priority): a command, and what it starts, runs at nice
// sandbox.DefaultNice (field 19 of /proc/self/stat).
func TestBwrapCommandsRunAtLowerPriority(t *testing.T) {
	t.Parallel()
	b := bwrapOrSkip(t)
	ws := open(t, workspaces(t, ownerOf(b)), "nice")
	res := runOK(t, b, sandbox.Spec{Workspace: ws.Dir, Command: `cut -d' ' -f19 /proc/self/stat; bash -c 'cut -d" " -f19 /proc/$$/stat'`})
	if res.Stdout != "10\n10\n" || sandbox.DefaultNice != 10 {
		t.Fatalf("nice inside: %q, want 10 twice; %+v", res.Stdout, res)
	}
}
