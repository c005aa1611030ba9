package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/llm"
)

// TestE6_AskParksAndResumes: an approver's ErrParked gives PrepPark (no result) only when the
// call may park; a resumed ask skips pre-execute and asks the approver again.
func TestE6_AskParksAndResumes(t *testing.T) {
	t.Parallel()
	var parkSeen []bool
	answer := ""
	e := newEnv(t, Config{Approver: ApproverFunc(func(_ context.Context, req ApprovalRequest) (string, error) {
		parkSeen = append(parkSeen, req.Park)
		if answer == "" {
			return "", fmt.Errorf("wrapped: %w", ErrParked)
		}
		return answer, nil
	})})
	e.register(e.g, rawTool("t", `1`, nil))
	var c counters
	e.count(&c)
	e.pre(e.g, Ask("why"))
	p := e.r.Prepare(e.ctx, Input{CallID: "c", Name: "t", Args: json.RawMessage(`{}`), Agent: "a", Park: true})
	if p.Kind != PrepPark || p.Result() != nil {
		t.Fatalf("kind %v result %+v", p.Kind, p.Result())
	}
	pre := c.pre
	answer = OutcomeAllowedOnce
	p = e.r.Prepare(e.ctx, Input{CallID: "c", Name: "t", Args: json.RawMessage(`{}`), Agent: "a", Park: true,
		Resumed: &Resumed{Ask: &ResumedAsk{Reason: "why"}}})
	if p.Kind != PrepDispatch || c.pre != pre {
		t.Fatalf("resumed kind %v, pre-execute ran %d more times", p.Kind, c.pre-pre)
	}
	if r := e.r.Finish(e.ctx, p); r.IsError {
		t.Fatalf("resumed result %+v", r.Error)
	}
	// Without Park an ErrParked is the approver's failure (final), never a park.
	answer = ""
	p = e.r.Prepare(e.ctx, Input{CallID: "d", Name: "t", Args: json.RawMessage(`{}`), Agent: "a"})
	if p.Kind != PrepFinalResult {
		t.Fatalf("unparkable kind %v", p.Kind)
	}
	if len(parkSeen) != 3 || !parkSeen[0] || parkSeen[2] {
		t.Fatalf("park flags %v", parkSeen)
	}
}

func TestE6_ClientTool(t *testing.T) {
	t.Parallel()
	if _, err := ClientTool(ClientSpec{Name: RunCodeName}); err == nil {
		t.Fatal("run_code accepted")
	}
	if _, err := ClientTool(ClientSpec{Name: "x", Parameters: json.RawMessage(`{`)}); err == nil {
		t.Fatal("broken parameters accepted")
	}
	big := json.RawMessage(fmt.Sprintf(`{"description":%q}`, make([]byte, MaxClientParameters)))
	if _, err := ClientTool(ClientSpec{Name: "x", Parameters: big}); err == nil {
		t.Fatal("oversized parameters accepted")
	}
	tool, err := ClientTool(ClientSpec{Name: "ask_user", Parameters: json.RawMessage(`{"type":"object"}`), TimeoutMs: 1500})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, Config{})
	e.register(e.g, tool)
	var c counters
	e.count(&c)
	in := Input{CallID: "c", Name: "ask_user", Args: json.RawMessage(`{}`)}
	p := e.r.Prepare(e.ctx, in)
	if p.Kind != PrepDispatch || !p.Client() || p.TimeoutMs() != 1500 {
		t.Fatalf("kind %v client %v timeout %d", p.Kind, p.Client(), p.TimeoutMs())
	}
	// Run server-side (no park): a clear failure, no hang.
	if r := e.r.Finish(e.ctx, p); contentText(r) != `Error: tool "ask_user" is executed by the client and cannot run here` {
		t.Fatalf("server-side run: %q", contentText(r))
	}
	pre := c.pre
	ok := eventlog.ClientResult{CallID: "c", Content: []llm.Block{llm.TextBlock("yes")}}
	in.Resumed = &Resumed{Client: &ok}
	r := e.r.Finish(e.ctx, e.r.Prepare(e.ctx, in))
	if r.IsError || contentText(r) != "yes" || c.pre != pre {
		t.Fatalf("client result %q %+v (pre-execute ran %d more)", contentText(r), r.Error, c.pre-pre)
	}
	bad := eventlog.ClientResult{CallID: "c", IsError: true, Content: []llm.Block{llm.TextBlock("no file")}}
	in.Resumed = &Resumed{Client: &bad}
	if r := e.r.Finish(e.ctx, e.r.Prepare(e.ctx, in)); !r.IsError || contentText(r) != "Error: no file" {
		t.Fatalf("client error %q", contentText(r))
	}
	late := eventlog.ClientResult{CallID: "c", TimedOut: true}
	in.Resumed = &Resumed{Client: &late}
	r = e.r.Finish(e.ctx, e.r.Prepare(e.ctx, in))
	if info := r.ErrorInfo(); info == nil || info.Code != fault.CodeToolTimeout || contentText(r) != "Error: tool call timed out after 1500ms" {
		t.Fatalf("timeout %q %+v", contentText(r), info)
	}
	if c.results != 4 {
		t.Fatalf("tools/result ran %d times", c.results)
	}
}
