package agents_test

import (
	"slices"
	"testing"

	"github.com/dshd/dshd/pkg/agents"
	"github.com/dshd/dshd/pkg/registry"
	"github.com/dshd/dshd/pkg/sandbox"
)

func TestBuiltinToolsWithWorkspace(t *testing.T) {
	t.Parallel()
	w, err := sandbox.NewWorkspaces(sandbox.WorkspacesConfig{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	shell, err := sandbox.NewLocal(sandbox.LocalConfig{Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	tools, err := agents.BuiltinTools(true, agents.WorkspaceTools{Workspaces: w, Shell: shell})
	if err != nil {
		t.Fatal(err)
	}
	var names, parallel []string
	for _, tl := range tools {
		names = append(names, tl.Name)
		if tl.Parallel {
			parallel = append(parallel, tl.Name)
		}
	}
	want := []string{"todo_write", "bash", "read", "write", "edit", "glob", "grep", "web_fetch", "echo", "sleep", "wait", "fail"}
	if !slices.Equal(names, want) {
		t.Errorf("tools %v, want %v", names, want)
	}
	if !slices.Equal(parallel, []string{"read", "web_fetch", "echo", "wait"}) {
		t.Errorf("parallel %v", parallel)
	}
	if _, err := agents.New(agents.Config{Tools: tools}); err != nil {
		t.Fatalf("the tools do not register: %v", err)
	}
	without, err := agents.BuiltinTools(false, agents.WorkspaceTools{Workspaces: w})
	if err != nil || len(without) != 7 || slices.ContainsFunc(without, func(tl *registry.Tool) bool { return tl.Name == "bash" }) {
		t.Errorf("without a shell: %d tools, %v", len(without), err)
	}
}
