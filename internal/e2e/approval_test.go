package e2e

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/sandbox/sandboxtest"
)

// TestApprovedBashAcrossReplicas: on two real server processes sharing a workspace root, a
// preset that asks before bash: the model (cmd/mockllm) calls bash through the first replica,
// the SSE stream (resumed at random points) shows approval/asked with the arguments, the
// approval is listed and answered on the second replica, and the command then runs in the
// bubblewrap sandbox of the replica that holds the turn, writing into the session's workspace.
// A second answer is refused, and the log is whole.
func TestApprovedBashAcrossReplicas(t *testing.T) {
	t.Parallel()
	sandboxtest.Bwrap(t)
	root := sandboxtest.WorkspaceRoot(t)
	c := newClusterOn(t, 2, 10*time.Second, "", "DSHD_WORKSPACE_ROOT="+root, "DSHD_SHELL=bwrap")
	first, second := c.replicas[0], c.replicas[1]
	ctx := t.Context()

	var p, s struct{ ID string }
	mustJSON(t, first.call(ctx, "POST", "/v1/presets", c.key, map[string]any{
		"name":     "ask-bash",
		"model":    map[string]string{"provider": "openai", "model": "mock", "baseUrl": c.mockURL},
		"approval": map[string]any{"policy": "ask", "ask": []string{"bash"}, "timeoutMs": 60000},
	}), 201, &p)
	mustJSON(t, first.call(ctx, "POST", "/v1/sessions", c.key, map[string]string{"presetId": p.ID}), 201, &s)
	f := follow(ctx, first, c.key, s.ID, rand.New(rand.NewPCG(3, 4)))
	args := `{"command":"echo approved > out.txt; cat out.txt","description":"write a file"}`
	if _, err := first.postMessage(ctx, c.key, s.ID, "tool:bash args:"+url.QueryEscape(args), "followup"); err != nil {
		t.Fatal(err)
	}

	// The approval is seen on the SSE stream, by a follower that cuts its connection at random
	// points and resumes with Last-Event-ID.
	var evs []storedEvent
	if err := waitFor(60*time.Second, func() (bool, error) {
		got, _, err := f.snapshot()
		evs = got
		for _, ev := range got {
			if ev.Type == eventlog.TypeApprovalAsked {
				return true, nil
			}
		}
		return false, err
	}); err != nil {
		t.Fatalf("no approval/asked on the stream: %v\n%s", err, describe(evs))
	}
	var asked eventlog.ApprovalAsked
	for _, ev := range evs {
		switch ev.Type {
		case eventlog.TypeApprovalAsked:
			_ = json.Unmarshal(ev.Data, &asked)
		case eventlog.TypeToolResult:
			t.Fatalf("a tool/result before the approval was answered\n%s", describe(evs))
		}
	}
	if asked.ToolName != "bash" || !strings.Contains(string(asked.Arguments), "echo approved") {
		t.Fatalf("asked %+v, want bash with its arguments", asked)
	}
	if _, err := os.Stat(filepath.Join(root, s.ID, "files", "out.txt")); err == nil {
		t.Fatal("the command ran before it was approved")
	}

	path := "/v1/sessions/" + s.ID + "/approvals"
	var list struct {
		Items []struct{ ID, ToolName string }
	}
	mustJSON(t, second.call(ctx, "GET", path, c.key, nil), 200, &list)
	if len(list.Items) != 1 || list.Items[0].ID != asked.ID {
		t.Fatalf("pending approvals on the second replica: %+v, want %s", list.Items, asked.ID)
	}
	if rp := second.call(ctx, "POST", path+"/"+asked.ID, c.key, map[string]string{"outcome": "allowed-once"}); rp.status != http.StatusOK {
		t.Fatalf("answer: %d %s", rp.status, rp.body)
	}

	evs = first.waitEvents(t, c.key, s.ID, 60*time.Second, func(evs []storedEvent) bool { return len(turnEnds(evs)) > 0 })
	if err := checkLog(evs); err != nil {
		t.Fatalf("%v\n%s", err, describe(evs))
	}
	var decided eventlog.ApprovalDecided
	var result string
	answered := false // an assistant message after the result: the model was called with it
	for _, ev := range evs {
		switch ev.Type {
		case eventlog.TypeApprovalDecided:
			_ = json.Unmarshal(ev.Data, &decided)
		case eventlog.TypeToolResult:
			result = string(ev.Data)
		case eventlog.TypeAssistantMessage:
			answered = result != ""
		}
	}
	if !answered {
		t.Fatalf("no model answer after the tool result\n%s", describe(evs))
	}
	if decided.ID != asked.ID || decided.Outcome != "allowed-once" {
		t.Fatalf("decided %+v", decided)
	}
	if !strings.Contains(result, "approved") || strings.Contains(result, `"isError":true`) {
		t.Fatalf("tool/result %s, want the command's output", result)
	}
	if b, err := os.ReadFile(filepath.Join(root, s.ID, "files", "out.txt")); err != nil || string(b) != "approved\n" {
		t.Fatalf("the workspace file: %q %v", b, err)
	}
	rp := first.call(ctx, "POST", path+"/"+asked.ID, c.key, map[string]string{"outcome": "rejected"})
	if rp.status != http.StatusConflict || !strings.Contains(string(rp.body), `"conflict"`) {
		t.Fatalf("a second answer: %d %s, want 409 conflict", rp.status, rp.body)
	}
}
