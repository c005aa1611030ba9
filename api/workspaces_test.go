package api_test

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/dshd/dshd/api"
	"github.com/dshd/dshd/pkg/sandbox"
)

// TestForkCopiesAndDeleteRemovesTheWorkspace: a fork over HTTP gives the child a copy of its
// source's workspace; deleting a session removes its workspace.
func TestForkCopiesAndDeleteRemovesTheWorkspace(t *testing.T) {
	t.Parallel()
	w, err := sandbox.NewWorkspaces(sandbox.WorkspacesConfig{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *api.Config) { c.Workspaces = w })
	src := e.sessionCreate(t, e.keyA)
	ws, err := w.Open(src.String())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws.Dir, "notes.txt"), []byte("from the source"), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = ws.Close()
	var child sessionOut
	e.do(t, "POST", "/v1/sessions", e.keyA, map[string]any{"fork": map[string]any{"sessionId": src}}).
		want(t, http.StatusCreated).json(t, &child)
	copied := filepath.Join(w.Root(), child.ID.String(), "files", "notes.txt")
	if b, err := os.ReadFile(copied); err != nil || string(b) != "from the source" {
		t.Fatalf("the child's workspace: %q %v", b, err)
	}
	e.do(t, "DELETE", "/v1/sessions/"+child.ID.String(), e.keyA, nil).want(t, http.StatusNoContent)
	if _, err := os.Stat(filepath.Dir(filepath.Dir(copied))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the deleted child's workspace is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(w.Root(), src.String(), "files", "notes.txt")); err != nil {
		t.Fatalf("the source's workspace: %v", err)
	}
}
