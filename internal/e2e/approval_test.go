package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/sandbox/sandboxtest"
)

// TestApprovedBashAcrossReplicas: on two real server processes sharing a workspace root, a
// preset that asks before bash: the model (cmd/mockllm) calls bash, the SSE stream (resumed at
// random points) shows approval/asked with the arguments, and the turn parks (E6): both replicas
// say waiting-approval and no call waits on either (dshd_approvals_pending). The approval is
// listed and answered on one of them, and the command then runs in the bubblewrap sandbox of the
// replica that resumes the turn, writing into the session's workspace; the model's next request (as cmd/mockllm
// recorded it) carries the tool message with the command's output. A second answer is refused,
// and the log is whole.
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
	var call eventlog.ToolCall
	for _, ev := range evs {
		switch ev.Type {
		case eventlog.TypeApprovalAsked:
			_ = json.Unmarshal(ev.Data, &asked)
		case eventlog.TypeToolCall:
			_ = json.Unmarshal(ev.Data, &call)
		case eventlog.TypeToolResult:
			t.Fatalf("a tool/result before the approval was answered\n%s", describe(evs))
		}
	}
	// The reference's shape (APR-3): the ask names the call, whose tool/call has the arguments.
	if asked.ToolName != "bash" || asked.Arguments != nil || asked.CallID != call.CallID || !strings.Contains(call.Arguments, "echo approved") {
		t.Fatalf("asked %+v for the call %+v, want bash without arguments, naming the call", asked, call)
	}
	if _, err := os.Stat(filepath.Join(root, s.ID, "files", "out.txt")); err == nil {
		t.Fatal("the command ran before it was approved")
	}

	// The ask parked the turn (E6): both replicas say waiting-approval, neither waits in a call
	// (their dshd_approvals_pending gauges read 0), and the answer may come to either.
	for _, r := range []*replica{first, second} {
		if err := waitFor(30*time.Second, func() (bool, error) {
			var st struct{ Status string }
			err := r.call(ctx, "GET", "/v1/sessions/"+s.ID, c.key, nil).decode(http.StatusOK, &st)
			return st.Status == "waiting-approval", err
		}); err != nil {
			t.Fatalf("%s: the session is not waiting-approval: %v", r.name, err)
		}
		if n, err := approvalsPending(r); err != nil || n != 0 {
			t.Fatalf("%s: %d calls wait for an approval (%v), want 0: the turn parks", r.name, n, err)
		}
	}
	holder, other := first, second
	if rand.IntN(2) == 0 {
		holder, other = second, first
	}
	t.Logf("the approval is answered on %s", other.name)

	path := "/v1/sessions/" + s.ID + "/approvals"
	var list struct {
		Items []struct{ ID, ToolName string }
	}
	mustJSON(t, other.call(ctx, "GET", path, c.key, nil), 200, &list)
	if len(list.Items) != 1 || list.Items[0].ID != asked.ID {
		t.Fatalf("pending approvals on the other replica: %+v, want %s", list.Items, asked.ID)
	}
	if rp := other.call(ctx, "POST", path+"/"+asked.ID, c.key, map[string]string{"outcome": "allowed-once"}); rp.status != http.StatusOK {
		t.Fatalf("answer: %d %s", rp.status, rp.body)
	}

	evs = first.waitEvents(t, c.key, s.ID, 60*time.Second, func(evs []storedEvent) bool { return len(turnEnds(evs)) > 0 })
	if err := checkLog(evs); err != nil {
		t.Fatalf("%v\n%s", err, describe(evs))
	}
	var decided eventlog.ApprovalDecided
	var result string
	for _, ev := range evs {
		switch ev.Type {
		case eventlog.TypeApprovalDecided:
			_ = json.Unmarshal(ev.Data, &decided)
		case eventlog.TypeToolResult:
			result = string(ev.Data)
		}
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
	// The tool result reached the model: the request after the call carries the tool message.
	if output, err := toolMessageSent(c.mockURL, asked.CallID); err != nil || !strings.Contains(output, "approved") {
		t.Fatalf("the model's tool message for %s: %q %v, want the command's output", asked.CallID, output, err)
	}
	rp := holder.call(ctx, "POST", path+"/"+asked.ID, c.key, map[string]string{"outcome": "rejected"})
	if rp.status != http.StatusConflict || !strings.Contains(string(rp.body), `"conflict"`) {
		t.Fatalf("a second answer: %d %s, want 409 conflict", rp.status, rp.body)
	}
}

// approvalsPending reads the dshd_approvals_pending gauge of a replica: the calls waiting there
// for an approval decision.
func approvalsPending(r *replica) (int, error) {
	resp, err := http.Get(r.url + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "dshd_approvals_pending "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int(f), err
		}
	}
	return 0, fmt.Errorf("%s/metrics has no dshd_approvals_pending", r.url)
}

// toolMessageSent returns the content of the tool message answering callID in the requests the
// mockllm process at mockURL recorded (GET /_requests), or an error when none carries one.
func toolMessageSent(mockURL, callID string) (string, error) {
	resp, err := http.Get(mockURL + "/_requests")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var reqs []struct {
		Messages []struct {
			Role       string `json:"role"`
			ToolCallID string `json:"tool_call_id"`
			Content    any    `json:"content"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&reqs); err != nil {
		return "", err
	}
	for _, r := range reqs {
		for _, m := range r.Messages {
			if m.Role == "tool" && m.ToolCallID == callID {
				return fmt.Sprint(m.Content), nil
			}
		}
	}
	return "", fmt.Errorf("none of the %d model requests has a tool message for %s", len(reqs), callID)
}
