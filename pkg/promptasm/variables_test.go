package promptasm

import (
	"context"
	"errors"
	"math"
	"testing"
)

func TestPRM3_VariableNames(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{})
	for _, name := range []string{"", "A", "aB", "1a", "_a", "a-b", "a b", "é", "{{a}}"} {
		if _, err := r.Variable(Global, name, constVar("v")); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Variable(%q) err = %v, want ErrInvalidName", name, err)
		}
	}
	for _, name := range []string{"a", "a_1", "snake_case9", "z__"} {
		if _, err := r.Variable(Global, name, constVar("v")); err != nil {
			t.Errorf("Variable(%q) err = %v", name, err)
		}
	}
	if _, err := r.Variable(Global, "a", constVar("v")); !errors.Is(err, ErrDuplicate) {
		t.Errorf("duplicate err = %v, want ErrDuplicate", err)
	}
}

func TestPRM3_NearestScopeWins(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{IncludeHarnessIdentity: new(false), Persona: "{{who}}"})
	must(t)(r.Variable("session", "who", constVar("session")))
	must(t)(r.Variable(Global, "who", constVar("global")))
	must(t)(r.Variable("preset", "who", constVar("preset")))
	cases := []struct {
		chain Chain
		want  string
	}{
		{nil, "global"},
		{Chain{"preset"}, "preset"},
		{Chain{"preset", "session"}, "session"},
		{Chain{"session", "preset"}, "preset"},
		{Chain{"unrelated"}, "global"},
	}
	for _, tc := range cases {
		if got := assemble(t, r, Input{Chain: tc.chain}).System; got != tc.want {
			t.Errorf("chain %v: System = %q, want %q", tc.chain, got, tc.want)
		}
	}
}

func TestPRM3_NoValueForThisAssembly(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{IncludeHarnessIdentity: new(false)})
	present := true
	must(t)(r.Variable(Global, "branch", func(context.Context, Input) (string, bool) { return "main", present }))
	must(t)(r.Section(Global, Section{Name: "git", Text: "Branch {{branch}}."}))
	if got := assemble(t, r, Input{}).System; got != "Branch main." {
		t.Fatalf("System = %q", got)
	}
	present = false
	ae := assembleErr(t, r, Input{}, ErrNoValue)
	if want := `assemble system prompt: section "git": prompt variable has no value: "{{branch}}" has no value in this assembly`; ae.Error() != want {
		t.Fatalf("error = %q\nwant    %q", ae.Error(), want)
	}
	// A valueless variable that no section references does not fail the assembly.
	r2 := newRegistry(t, Config{})
	must(t)(r2.Variable(Global, "branch", func(context.Context, Input) (string, bool) { return "", false }))
	assemble(t, r2, Input{})
}

func TestPRM10_LoopSuppliesProviderModelCWD(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{IncludeHarnessIdentity: new(false), Persona: "{{provider}}/{{model}} in {{cwd}}"})
	in := Input{Provider: "openai", Model: "deepseek-chat", CWD: "/work"}
	if got := assemble(t, r, in).System; got != "openai/deepseek-chat in /work" {
		t.Fatalf("System = %q", got)
	}
	assembleErr(t, r, Input{Provider: "openai", Model: "deepseek-chat"}, ErrNoValue)
	must(t)(r.Variable("agent", VarModel, constVar("pinned")))
	if got := assemble(t, r, Input{Chain: Chain{"agent"}, Provider: "p", Model: "m", CWD: "/"}).System; got != "p/pinned in /" {
		t.Fatalf("shadowed System = %q", got)
	}
	if _, err := r.Variable(Global, VarCWD, constVar("x")); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("global cwd err = %v, want ErrDuplicate", err)
	}
}

func TestPRM10_ChangeNotifiedOnEveryRegistrationChange(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{})
	changes := 0
	stop := r.OnChange(func() error { changes++; return nil })
	var disposers []func()
	for _, reg := range []func() (func(), error){
		func() (func(), error) { return r.Section("s", Section{Name: "x"}) },
		func() (func(), error) { return r.RuntimeContext(Global, ContextEntry{Name: "c"}) },
		func() (func(), error) { return r.Variable("s", "v", constVar("")) },
		func() (func(), error) { return r.Tools(Global, staticTools("t")) },
		func() (func(), error) { return r.SuppressRuntimeContext("s") },
	} {
		disposers = append(disposers, must(t)(reg()))
	}
	if changes != 5 {
		t.Fatalf("changes after 5 registrations = %d", changes)
	}
	for _, d := range disposers {
		d()
		d()
	}
	if changes != 10 {
		t.Fatalf("changes after 5 disposals (each twice) = %d, want 10", changes)
	}
	must(t)(r.OnAssemble(Global, func(ctx context.Context, a Assembly, next Next) (Assembly, error) { return next(ctx, a) }))
	if _, err := r.Section(Global, Section{Name: "dup", Order: math.NaN()}); err == nil {
		t.Fatal("NaN order accepted")
	}
	stop()
	must(t)(r.Section(Global, Section{Name: "after"}))
	if changes != 10 {
		t.Fatalf("changes = %d: a listener, a failed registration or a removed listener was counted", changes)
	}
}

func TestPRM10_FailingChangeListenerRollsBack(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{IncludeHarnessIdentity: new(false)})
	var seen string
	stop := r.OnChange(func() error {
		// The registration is visible while listeners run, and the Registry is usable from them.
		res, err := r.Assemble(context.Background(), Input{})
		if err != nil {
			return err
		}
		seen = res.System
		return errors.New("listener refused")
	})
	_, err := r.Section(Global, Section{Name: "x", Text: "X"})
	if err == nil || err.Error() != "prompt change listener failed, registration rolled back: listener refused" {
		t.Fatalf("err = %v", err)
	}
	if seen != "X" {
		t.Fatalf("listener saw System %q, want X", seen)
	}
	if got := assemble(t, r, Input{}).System; got != "" {
		t.Fatalf("System after rollback = %q, want empty", got)
	}
	if _, err := r.Variable("s", "v", constVar("")); err == nil {
		t.Fatal("variable registration survived a failing listener")
	}
	stop()
	must(t)(r.Section(Global, Section{Name: "x", Text: "X again"}))
	must(t)(r.Variable("s", "v", constVar("")))
	if got := assemble(t, r, Input{}).System; got != "X again" {
		t.Fatalf("System after re-registration = %q", got)
	}
}
