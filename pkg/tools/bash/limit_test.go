package bash_test

import (
	"context"
	"strings"
	"testing"

	"github.com/dshd/dshd/pkg/fairq"
	"github.com/dshd/dshd/pkg/sandbox"
	"github.com/dshd/dshd/pkg/sandbox/sandboxtest"
	"github.com/dshd/dshd/pkg/tools/bash"
	"github.com/dshd/dshd/pkg/tools/tooltest"
)

// slotsEnv is a bash tool whose commands share q, with sessions s1 and s2 of tenant A, s3 of B
// and s4 of C; queued receives a value whenever a command starts to wait for a slot.
func slotsEnv(t *testing.T, q *fairq.Queue) (*env, chan struct{}) {
	t.Helper()
	l, err := sandbox.NewLocal(sandbox.LocalConfig{Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	w, err := sandbox.NewWorkspaces(sandbox.WorkspacesConfig{Root: sandboxtest.WorkspaceRoot(t)})
	if err != nil {
		t.Fatal(err)
	}
	for s, tenant := range map[string]string{"s1": "A", "s2": "A", "s3": "B", "s4": "C"} {
		if err := w.Bind(s, tenant); err != nil {
			t.Fatal(err)
		}
	}
	queued := make(chan struct{}, 10)
	tl, err := bash.Tool(bash.WithOnQueued(bash.Config{Shell: l, Workspaces: w, Slots: q}, func() { queued <- struct{}{} }))
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, w: w, tool: tl, reg: tooltest.New(t, tl)}, queued
}

// TestBashCommandSlotsBoundATenantAndTheReplica: sandboxed commands shared the server's cores
// with no bound (issue 17, finding 4: one tenant's commands took every core from the other
// tenants' turns). With 2 slots, 1 per tenant: while tenant A holds its one, A's next command
// waits (not run when the wait takes its whole timeout, aborted when cancelled while it waits,
// run when A's slot is given back) and B's runs at once; with both slots held, C's waits too.
func TestBashCommandSlotsBoundATenantAndTheReplica(t *testing.T) {
	t.Parallel()
	q, err := fairq.New(2, 1)
	if err != nil {
		t.Fatal(err)
	}
	e, queued := slotsEnv(t, q)
	bg := context.Background()
	holdA := q.Enqueue("A")

	notRun := "[not run: the command waited its whole timeout of 1ms for a command slot; this replica runs at most 2 commands at once, at most 1 of one tenant"
	if got, code := e.call(bg, "s2", map[string]any{"command": "echo ran", "timeoutMs": 1}); code != "" || !strings.HasPrefix(got, notRun) {
		t.Fatalf("A's command past A's share: %q %s", got, code)
	}
	<-queued
	if got, _ := e.call(bg, "s3", map[string]any{"command": "echo b"}); got != "b" {
		t.Fatalf("B's command beside A's: %q", got)
	}
	if len(queued) != 0 {
		t.Fatal("B's command waited for a slot though one was free")
	}

	ctx, cancel := context.WithCancel(bg)
	aborted := make(chan string, 1)
	go func() { _, code := e.call(ctx, "s1", map[string]any{"command": "echo ran"}); aborted <- code }()
	<-queued
	cancel()
	if code := <-aborted; code != "ABORTED" {
		t.Fatalf("A's command cancelled while it waited: code %q, want ABORTED", code)
	}

	ran := make(chan string, 1)
	go func() { got, _ := e.call(bg, "s1", map[string]any{"command": "echo waited"}); ran <- got }()
	<-queued
	holdA.Release()
	if got := <-ran; got != "waited" {
		t.Fatalf("A's command after A's slot was given back: %q", got)
	}

	holdA, holdB := q.Enqueue("A"), q.Enqueue("B")
	if got, _ := e.call(bg, "s4", map[string]any{"command": "echo ran", "timeoutMs": 1}); !strings.HasPrefix(got, notRun) {
		t.Fatalf("C's command with every slot held: %q", got)
	}
	holdA.Release()
	holdB.Release()
}
