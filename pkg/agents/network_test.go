package agents_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/agentloop"
	"github.com/dshd/dshd/pkg/agents"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/preset"
	"github.com/dshd/dshd/pkg/sandbox"
	"github.com/dshd/dshd/pkg/sandbox/sandboxtest"
)

// workspaceAgents are agents with the workspace tools over bubblewrap, given to them as
// Config.Workspace too.
func workspaceAgents(t *testing.T, networkDisabled bool) (*agents.Agents, *sandbox.Workspaces) {
	t.Helper()
	b := sandboxtest.Bwrap(t)
	wc := sandbox.WorkspacesConfig{Root: sandboxtest.WorkspaceRoot(t)}
	if uid, gid, ok := b.Owner(); ok {
		wc.Owner = &sandbox.Owner{UID: uid, GID: gid}
	}
	w, err := sandbox.NewWorkspaces(wc)
	if err != nil {
		t.Fatal(err)
	}
	wt := agents.WorkspaceTools{Workspaces: w, Shell: b}
	tools, err := agents.BuiltinTools(false, wt)
	if err != nil {
		t.Fatal(err)
	}
	a := newAgentsWith(t, func(c *agents.Config) {
		c.Tools, c.Workspace, c.SandboxNetworkDisabled = tools, &wt, networkDisabled
	})
	return a, w
}

// runBash runs one turn of session s whose scripted model calls bash with command, and returns
// the tool result's event data.
func runBash(t *testing.T, a *agents.Agents, s agents.Session, command string) string {
	t.Helper()
	cfg, release, err := a.Agent(s)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	args := url.PathEscape(fmt.Sprintf(`{"command":%q,"description":"probe"}`, command))
	j := eventlog.NewMemJournal(nil)
	if _, err := j.Append(context.Background(), func(eventlog.Head) ([]eventlog.NewEvent, error) {
		return []eventlog.NewEvent{{Type: eventlog.TypeInboxSpliced,
			Data: eventlog.Insertion(eventlog.InboxNextTurn, 0, llm.NewUserMessage("u1", "tool:bash args:"+args))}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := agentloop.NewRunner(cfg, j).Serve(context.Background()); err != nil {
		t.Fatal(err)
	}
	results := find(j.Events(), eventlog.TypeToolResult)
	if len(results) != 1 {
		t.Fatalf("tool results %v", results)
	}
	return results[0]
}

func bashDescription(t *testing.T, a *agents.Agents, p preset.Preset) string {
	t.Helper()
	_, release, err := a.Agent(agents.Session{ID: uuid.New(), Preset: p})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	schemas, err := a.Registry().Schemas(fmt.Sprintf("preset:%s@%d", p.ID, p.Version))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range schemas {
		if s.Name == "bash" {
			return s.Description
		}
	}
	return ""
}

// TestBashNetworkFollowsThePreset: a preset's tools.bash.network reaches the sandbox. Without it
// (the default) a command sees no interface but its loopback and bash's description says there
// is no network; with it the same command sees the egress network's interface (pasta's; its
// rules are tested in pkg/sandbox, TestEgressReachesOnlyPublicAddresses) and the description
// says the network is on. tools.deny still
// hides that bash, and the session's workspace is bound to its tenant.
func TestBashNetworkFollowsThePreset(t *testing.T) {
	t.Parallel()
	a, w := workspaceAgents(t, false)
	sandboxtest.Network(t, sandboxtest.Bwrap(t))
	cmd, greeting := sandboxtest.NetworkProbe()
	off := presetOf(t, `{"name":"off","model":{"provider":"scripted","model":"m"}}`)
	on := presetOf(t, `{"name":"on","model":{"provider":"scripted","model":"m"},"tools":{"bash":{"network":true}}}`)

	if d := bashDescription(t, a, off); !strings.Contains(d, "there is no network") {
		t.Errorf("off: %q", d)
	}
	if d := bashDescription(t, a, on); !strings.Contains(d, "the network is on") {
		t.Errorf("on: %q", d)
	}
	tenant := uuid.New()
	s := agents.Session{ID: uuid.New(), TenantID: tenant, Preset: off}
	if got := runBash(t, a, s, cmd); strings.Contains(got, greeting) || !strings.Contains(got, "[exit code: ") {
		t.Fatalf("without the network: %s", got)
	}
	if got := runBash(t, a, agents.Session{ID: uuid.New(), TenantID: tenant, Preset: on}, cmd); !strings.Contains(got, greeting) {
		t.Fatalf("with the network: %s", got)
	}
	ws, err := w.Open(s.ID.String())
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if ws.Tenant() != tenant.String() {
		t.Errorf("the workspace's tenant is %q, want %s", ws.Tenant(), tenant)
	}

	denied := presetOf(t, `{"name":"denied","model":{"provider":"scripted","model":"m"},"tools":{"deny":["bash"],"bash":{"network":true}}}`)
	if d := bashDescription(t, a, denied); d != "" {
		t.Errorf("tools.deny did not hide the network bash: %q", d)
	}
	allowed := presetOf(t, `{"name":"allowed","model":{"provider":"scripted","model":"m"},"tools":{"allow":["read"],"bash":{"network":true}}}`)
	if d := bashDescription(t, a, allowed); d != "" {
		t.Errorf("tools.allow did not hide the network bash: %q", d)
	}
	if _, ok := a.Registry().Get("bash", ""); !ok {
		t.Fatal("no global bash")
	}
	if g, _ := a.Registry().Get("bash", ""); !strings.Contains(g.Description, "there is no network") {
		t.Errorf("the global bash: %q", g.Description)
	}
}

// TestBashNetworkForbiddenByTheOperator: with the sandbox network forbidden
// (Config.SandboxNetworkDisabled, DSHD_SANDBOX_NETWORK=0) a preset asking for it is refused, and
// one stored before gets the bash without the network.
func TestBashNetworkForbiddenByTheOperator(t *testing.T) {
	t.Parallel()
	a, _ := workspaceAgents(t, true)
	body := preset.Body{Name: "on", Model: preset.Model{Provider: preset.ProviderScripted, Model: "m"}}
	yes := true
	body.Tools.Bash.Network = &yes
	err := a.Rules().Validate(&body)
	var ve *preset.ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) != 1 || ve.Problems[0].Field != "tools.bash.network" {
		t.Fatalf("validate: %v", err)
	}
	stored := presetOf(t, `{"name":"on","model":{"provider":"scripted","model":"m"},"tools":{"bash":{"network":true}}}`)
	if d := bashDescription(t, a, stored); !strings.Contains(d, "there is no network") {
		t.Errorf("stored preset: %q", d)
	}
	cmd, greeting := sandboxtest.NetworkProbe()
	if got := runBash(t, a, agents.Session{ID: uuid.New(), Preset: stored}, cmd); strings.Contains(got, greeting) ||
		!strings.Contains(got, "[exit code: ") {
		t.Fatalf("connected while forbidden: %s", got)
	}
}
