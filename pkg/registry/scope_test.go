package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/kernel"
)

func TestSCP1_ViewConstruction(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.register(e.g, rawTool("g", `"global-g"`, nil))
	e.register(e.g, rawTool("x", `"global-x"`, nil))
	preset := e.scope("preset:p", "")
	agent := e.scope("agent:a", "preset:p")
	e.register(preset, rawTool("x", `"preset-x"`, nil))
	e.register(preset, rawTool("pt", `"preset-pt"`, nil))
	e.register(agent, rawTool("own", `"own"`, nil))
	e.r.Restrict(agent, Restriction{Deny: []string{"g"}})
	if got := strings.Join(e.r.Names("agent:a"), ","); got != "own,pt,x" {
		t.Fatalf("view %s", got)
	}
	if r := e.execIn("agent:a", "x", `{}`); contentText(r) != "preset-x" {
		t.Fatalf("nearer layer must shadow: %q", contentText(r))
	}
}

func TestSCP2_ShadowingIndependentOfOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	a := e.scope("agent:a", "")
	e.register(e.g, rawTool("t", `"global"`, nil))
	e.register(a, rawTool("t", `"scoped"`, nil))
	if r := e.execIn("agent:a", "t", `{}`); contentText(r) != "scoped" {
		t.Fatal("scoped registered second must still shadow")
	}
	if r := e.exec("t", `{}`); contentText(r) != "global" {
		t.Fatal("global view changed")
	}
}

func TestSCP3_RestrictErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	a := e.scope("agent:a", "")
	e.register(a, rawTool("own", `1`, nil))
	cases := []struct {
		f    *kernel.Fiber
		r    Restriction
		want string
	}{
		{e.g, Restriction{Deny: []string{"x"}}, "requires a scoped context"},
		{a, Restriction{}, "needs allow or deny"},
		{a, Restriction{Deny: []string{RunCodeName}}, `cannot name "run_code"`},
		{a, Restriction{Allow: []string{"own"}}, "known tools: (none)"},
	}
	for _, c := range cases {
		if _, err := e.r.Restrict(c.f, c.r); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v", c.r, err)
		}
	}
}

func TestSCP4_FilterCopiedIntersectingAndLiftable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	for _, n := range []string{"a", "b", "c"} {
		e.register(e.g, rawTool(n, `1`, nil))
	}
	s := e.scope("agent:s", "")
	allow := []string{"a", "b"}
	d1, _ := e.r.Restrict(s, Restriction{Allow: allow})
	allow[0] = "c"
	d2, _ := e.r.Restrict(s, Restriction{Deny: []string{"b"}})
	if got := strings.Join(e.r.Names("agent:s"), ","); got != "a" {
		t.Fatalf("intersection %s", got)
	}
	d1()
	if got := strings.Join(e.r.Names("agent:s"), ","); got != "a,c" {
		t.Fatalf("after lifting allow %s", got)
	}
	e.register(e.g, rawTool("later", `1`, nil))
	if got := strings.Join(e.r.Names("agent:s"), ","); got != "a,c,later" {
		t.Fatalf("deny must let later tools through: %s", got)
	}
	d2()
	e.r.Restrict(s, Restriction{Allow: []string{"a"}})
	e.register(e.g, rawTool("later2", `1`, nil))
	if got := strings.Join(e.r.Names("agent:s"), ","); got != "a" {
		t.Fatalf("allow must exclude later tools: %s", got)
	}
}

func TestSCP5_AncestorRestrictionAppliesToDescendants(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.register(e.g, rawTool("a", `1`, nil))
	e.register(e.g, rawTool("b", `1`, nil))
	p := e.scope("agent:parent", "")
	c := e.scope("agent:child", "agent:parent")
	e.r.Restrict(p, Restriction{Deny: []string{"a"}})
	e.r.Restrict(c, Restriction{Deny: []string{"b"}})
	if got := strings.Join(e.r.Names("agent:child"), ","); got != "" {
		t.Fatalf("child view %q", got)
	}
	if got := strings.Join(e.r.Names("agent:parent"), ","); got != "b" {
		t.Fatalf("parent view %q", got)
	}
}

func TestSCP6_RestrictedCallIsUnknownTool(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.register(e.g, rawTool("a", `1`, nil))
	s := e.scope("agent:s", "")
	e.r.Restrict(s, Restriction{Deny: []string{"a"}})
	r := e.execIn("agent:s", "a", `{}`)
	u := e.execIn("agent:s", "zzz", `{}`)
	if code(r) != fault.CodeUnknownTool || contentText(r) != `Error: unknown tool "a"` || code(u) != fault.CodeUnknownTool {
		t.Fatalf("got %+v", r)
	}
	if schemas, _ := e.r.Schemas("agent:s"); len(schemas) != 0 {
		t.Fatal("presentation and execution views differ")
	}
}

func TestSCP7_PipelineEventsAreScopeFiltered(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.register(e.g, rawTool("t", `1`, nil))
	a := e.scope("agent:a", "")
	e.scope("agent:b", "")
	seen := map[string]int{}
	for _, f := range []*kernel.Fiber{e.g, a} {
		name := f.Name()
		kernel.Listen(f, e.r.Hooks.Result, func(context.Context, *Call) error { seen[name]++; return nil })
	}
	e.execIn("agent:a", "t", `{}`)
	e.execIn("agent:b", "t", `{}`)
	e.exec("t", `{}`)
	if seen["global"] != 3 || seen["agent:a"] != 1 {
		t.Fatalf("got %v", seen)
	}
}

func TestSCP8_ScopesAreNotAuthority(t *testing.T) {
	t.Parallel()
	// Restrictions filter views; a nested (Parent) call from inside the scope still resolves
	// through the same view, so the restriction holds, but nothing stops a caller from using
	// another scope key. The registry documents this; the check here is that Input.Scope alone
	// picks the view.
	e := newEnv(t, Config{})
	e.register(e.g, rawTool("a", `1`, nil))
	s := e.scope("agent:s", "")
	e.r.Restrict(s, Restriction{Deny: []string{"a"}})
	if r := e.r.Execute(e.ctx, Input{CallID: "c", Name: "a", Args: json.RawMessage(`{}`), Scope: "", Agent: "agent:s"}); r.IsError {
		t.Fatal("the view is chosen by Input.Scope only")
	}
}

// TestFinding11_RestrictErrorEchoesLittle (issue 9, finding 11): a restriction naming many
// unknown tools fails with an error that lists the first few, clipped, and counts the others.
func TestFinding11_RestrictErrorEchoesLittle(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.register(e.g, rawTool("g", `1`, nil))
	f := e.scope("agent:a", "")
	var ghosts []string
	for i := range 1000 {
		ghosts = append(ghosts, fmt.Sprintf("ghost_%d_%s", i, strings.Repeat("x", 200)))
	}
	_, err := e.r.Restrict(f, Restriction{Allow: ghosts})
	if err == nil || len(err.Error()) > 1024 || !strings.Contains(err.Error(), "and 990 more") {
		t.Fatalf("%d bytes: %.300v", len(fmt.Sprint(err)), err)
	}
}
