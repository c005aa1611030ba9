package api_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"

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

// sessionCount is how many sessions tenant A has.
func (e *env) sessionCount(t *testing.T) int {
	t.Helper()
	var p struct{ Items []sessionOut }
	e.do(t, "GET", "/v1/sessions?limit=100", e.keyA, nil).want(t, http.StatusOK).json(t, &p)
	return len(p.Items)
}

// TestForkHoldsTheSourcesRunLease (issue 17, finding 1): a fork at the boundary of a closed turn
// copied the source's workspace while a command of the source's next turn could still run (and
// swap files under the copy). Now the fork holds the source's run lease for the copy: during a
// turn it answers 409 session_busy, whatever its boundary, and leaves no child behind; once the
// turn is over it forks, and the source runs turns again.
func TestForkHoldsTheSourcesRunLease(t *testing.T) {
	t.Parallel()
	w, err := sandbox.NewWorkspaces(sandbox.WorkspacesConfig{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *api.Config) { c.Workspaces = w })
	src := e.sessionCreate(t, e.keyA)
	sid := src.String()
	ws, err := w.Open(sid)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws.Dir, "notes.txt"), []byte("from the source"), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = ws.Close()
	fork := map[string]any{"fork": map[string]any{"sessionId": src}}
	e.postText(t, sid, "text")
	e.endedTurn(t, sid, 1)
	closed := map[string]any{"fork": map[string]any{"sessionId": src, "boundarySeq": e.sessionOf(t, sid).LastSeq}}
	e.postText(t, sid, `tool:sleep args:{"ms":60000}`)
	waitUntil(t, "the sleep to run", func() bool { return e.sessionOf(t, sid).Status == "running" })
	e.do(t, "POST", "/v1/sessions", e.keyA, closed).wantProblem(t, http.StatusConflict, api.CodeSessionBusy)
	e.do(t, "POST", "/v1/sessions", e.keyA, fork).wantProblem(t, http.StatusConflict, api.CodeSessionBusy)
	if n := e.sessionCount(t); n != 1 {
		t.Fatalf("%d sessions after refused forks, want 1", n)
	}
	e.do(t, "POST", "/v1/sessions/"+sid+"/cancel", e.keyA, nil).want(t, http.StatusOK)
	e.endedTurn(t, sid, 2)
	waitUntil(t, "the lease to be free", func() bool { return e.sessionOf(t, sid).Status == "idle" })
	var child sessionOut
	e.do(t, "POST", "/v1/sessions", e.keyA, fork).want(t, http.StatusCreated).json(t, &child)
	if b, err := os.ReadFile(filepath.Join(w.Root(), child.ID.String(), "files", "notes.txt")); err != nil || string(b) != "from the source" {
		t.Fatalf("the child's workspace: %q %v", b, err)
	}
	e.postText(t, sid, "text") // the fork gave the lease back
	e.endedTurn(t, sid, 3)
}

// TestForkIsCountedAgainstTheTenantWorkspaceBound (issue 17, finding 3): with the tenant bound
// at 50 MiB, forks of a session over it were accepted (the disk grew by 1.2 GB). Scaled down: a
// fork is admitted against the bound before it copies and refused with 409
// workspace_quota_exceeded once the copy would go over, writing nothing and leaving no child.
func TestForkIsCountedAgainstTheTenantWorkspaceBound(t *testing.T) {
	t.Parallel()
	const bound = 4 << 20
	w, err := sandbox.NewWorkspaces(sandbox.WorkspacesConfig{Root: t.TempDir(), TenantQuotaBytes: bound})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *api.Config) { c.Workspaces = w })
	src := e.sessionCreate(t, e.keyA)
	if err := w.Bind(src.String(), e.tenantA.String()); err != nil { // as the agents do before a turn
		t.Fatal(err)
	}
	ws, err := w.Open(src.String())
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if err := os.WriteFile(filepath.Join(ws.Dir, "big"), make([]byte, 3<<19), 0o644); err != nil { // 1.5 MiB
		t.Fatal(err)
	}
	fork := map[string]any{"fork": map[string]any{"sessionId": src}}
	e.do(t, "POST", "/v1/sessions", e.keyA, fork).want(t, http.StatusCreated) // 3 MiB in all
	e.do(t, "POST", "/v1/sessions", e.keyA, fork).wantProblem(t, http.StatusConflict, api.CodeWorkspaceQuotaExceeded)
	if n := e.sessionCount(t); n != 2 {
		t.Fatalf("%d sessions, want the source and one fork", n)
	}
	// A command wrote past the bound: no fork of it is accepted.
	if err := os.WriteFile(filepath.Join(ws.Dir, "bigger"), make([]byte, 2<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		e.do(t, "POST", "/v1/sessions", e.keyA, fork).wantProblem(t, http.StatusConflict, api.CodeWorkspaceQuotaExceeded)
	}
	if n, err := w.TenantUsage(e.tenantA.String()); err != nil || n != 3<<19+3<<19+2<<20 {
		t.Fatalf("the tenant's usage %d (%v): the refused forks wrote something", n, err)
	}
	entries, err := os.ReadDir(w.Root())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range entries {
		if strings.HasPrefix(d.Name(), ".copy-") {
			t.Errorf("a refused fork left %s", d.Name())
		}
	}
}

// TestForkOfADeletedSourceAnswersSessionNotLive (review of issue 17, finding 7c): with workspaces
// the fork's hold of the source's lease answered 404 for a deleted source, where the API
// documents 409 session_not_live (as without workspaces). An unknown source is still 404.
func TestForkOfADeletedSourceAnswersSessionNotLive(t *testing.T) {
	t.Parallel()
	w, err := sandbox.NewWorkspaces(sandbox.WorkspacesConfig{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *api.Config) { c.Workspaces = w })
	src := e.sessionCreate(t, e.keyA)
	e.do(t, "DELETE", "/v1/sessions/"+src.String(), e.keyA, nil).want(t, http.StatusNoContent)
	e.do(t, "POST", "/v1/sessions", e.keyA, map[string]any{"fork": map[string]any{"sessionId": src}}).
		wantProblem(t, http.StatusConflict, api.CodeSessionNotLive)
	e.do(t, "POST", "/v1/sessions", e.keyA, map[string]any{"fork": map[string]any{"sessionId": uuid.New()}}).
		want(t, http.StatusNotFound)
	if n := e.sessionCount(t); n != 0 {
		t.Fatalf("%d sessions after refused forks, want 0", n)
	}
}

// copyHook is sandbox.Workspaces whose Copy runs during first, before copying.
type copyHook struct {
	*sandbox.Workspaces
	during func(src, dst string)
}

func (c copyHook) Copy(src, dst string) error {
	c.during(src, dst)
	return c.Workspaces.Copy(src, dst)
}

// TestForkChildAppearsOnlyWithItsWorkspace (review of issue 17, finding 7d): the child was
// created (and listed) before its workspace copy finished, so a turn posted to it meanwhile
// created its workspace, the copy then failed ("already has a workspace") and the fork deleted
// the child mid-turn. Now the copy is written under the child's id before the child exists:
// while it copies, the tenant lists only the source, and no session has the copy's id.
func TestForkChildAppearsOnlyWithItsWorkspace(t *testing.T) {
	t.Parallel()
	w, err := sandbox.NewWorkspaces(sandbox.WorkspacesConfig{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var e *env
	var listed int
	var dstID string
	hook := copyHook{Workspaces: w, during: func(_, dst string) { listed, dstID = e.sessionCount(t), dst }}
	e = newEnv(t, func(c *api.Config) { c.Workspaces = hook })
	src := e.sessionCreate(t, e.keyA)
	ws, err := w.Open(src.String())
	if err != nil {
		t.Fatal(err)
	}
	_ = ws.Close()
	var child sessionOut
	e.do(t, "POST", "/v1/sessions", e.keyA, map[string]any{"fork": map[string]any{"sessionId": src}}).
		want(t, http.StatusCreated).json(t, &child)
	if listed != 1 {
		t.Fatalf("%d sessions listed while the fork copied, want 1 (the child appeared before its workspace)", listed)
	}
	if dstID != child.ID.String() {
		t.Fatalf("the copy went to %s, the child is %s", dstID, child.ID)
	}
}

// TestForkThatLostTheLeaseCreatesNothing (review of issue 17, finding 7a): the fork's hold
// ignored a lost lease, so a turn of the source could start (and change its files) mid-copy and
// the fork still created the child. Here the lease is taken by another owner during the copy:
// the fork answers 409 session_busy, no child is created and the copy is removed.
func TestForkThatLostTheLeaseCreatesNothing(t *testing.T) {
	t.Parallel()
	w, err := sandbox.NewWorkspaces(sandbox.WorkspacesConfig{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var e *env
	var dstID string
	hook := copyHook{Workspaces: w, during: func(src, dst string) {
		dstID = dst
		if _, err := e.pool.Exec(context.Background(), `UPDATE session_counters SET run_owner = $2 WHERE session_id = $1`,
			src, uuid.New()); err != nil {
			t.Error(err)
		}
	}}
	e = newEnv(t, func(c *api.Config) { c.Workspaces = hook })
	src := e.sessionCreate(t, e.keyA)
	ws, err := w.Open(src.String())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws.Dir, "notes.txt"), []byte("from the source"), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = ws.Close()
	p := e.do(t, "POST", "/v1/sessions", e.keyA, map[string]any{"fork": map[string]any{"sessionId": src}}).
		wantProblem(t, http.StatusConflict, api.CodeSessionBusy)
	if !strings.Contains(p.Detail, "lost") {
		t.Fatalf("detail %q, want the lost lease", p.Detail)
	}
	if n := e.sessionCount(t); n != 1 {
		t.Fatalf("%d sessions after a fork that lost its lease, want 1", n)
	}
	if _, err := os.Stat(filepath.Join(w.Root(), dstID)); dstID == "" || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the copy %q of a fork that lost its lease: %v", dstID, err)
	}
}
