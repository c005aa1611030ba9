package sandbox_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/dshd/dshd/pkg/sandbox"
)

func TestLocalIsRefusedUnlessEnabled(t *testing.T) {
	t.Parallel()
	if _, err := sandbox.NewLocal(sandbox.LocalConfig{}); !errors.Is(err, sandbox.ErrLocalDisabled) {
		t.Fatalf("NewLocal without Enabled: %v, want ErrLocalDisabled", err)
	}
}

func local(t *testing.T) *sandbox.Local {
	t.Helper()
	l, err := sandbox.NewLocal(sandbox.LocalConfig{Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestLocalRunsInTheWorkspaceWithAMinimalEnvironment(t *testing.T) {
	t.Parallel()
	l := local(t)
	ws := open(t, workspaces(t, nil), "local")
	res := runOK(t, l, sandbox.Spec{Workspace: ws.Dir, Command: "pwd; env; exit 4"})
	if !strings.HasPrefix(res.Stdout, ws.Dir+"\n") || res.ExitCode != 4 {
		t.Fatalf("%+v", res)
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.Contains(res.Stdout, kv) && !shellSets[k] && k != "PATH" {
			t.Errorf("the server's %s reached the command", k)
		}
	}
}

func TestLocalTimeoutAndCancelKillTheProcessGroup(t *testing.T) {
	t.Parallel()
	l := local(t)
	for _, mode := range []string{"timeout", "cancel"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ws := open(t, workspaces(t, nil), "kill")
			testKillsTree(t, l, ws, mode, false) // a setsid child leaves the group (documented)
		})
	}
}
