package promptasm

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestPRM6_WaterfallIsAuthoritative(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{IncludeHarnessIdentity: new(false), Persona: "Persona."})
	must(t)(r.Tools(Global, staticTools("a", "b")))
	must(t)(r.OnAssemble(Global, func(ctx context.Context, a Assembly, next Next) (Assembly, error) {
		a.Sections = append(a.Sections, SectionText{Name: "listener", Order: 500, Text: "Added {{extra}}."})
		a.Variables["extra"] = Value{Text: "by a listener"}
		a.Tools = a.Tools[1:]
		return next(ctx, a)
	}))
	res := assemble(t, r, Input{})
	if res.System != "Persona.\n\nAdded by a listener." || toolNamesOf(res.Tools) != "b" {
		t.Fatalf("System = %q, tools = %s", res.System, toolNamesOf(res.Tools))
	}
}

func TestPRM6_FirstRegisteredIsOutermost(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{})
	var trace []string
	tracer := func(label string) AssembleListener {
		return func(ctx context.Context, a Assembly, next Next) (Assembly, error) {
			trace = append(trace, label+">")
			out, err := next(ctx, a)
			trace = append(trace, "<"+label)
			return out, err
		}
	}
	must(t)(r.OnAssemble("session", tracer("session")))
	must(t)(r.OnAssemble(Global, tracer("global")))
	must(t)(r.OnAssemble("other", tracer("other")))
	assemble(t, r, Input{Chain: Chain{"session"}})
	if got := strings.Join(trace, " "); got != "session> global> <global <session" {
		t.Fatalf("trace = %s", got)
	}
	trace = nil
	assemble(t, r, Input{})
	if got := strings.Join(trace, " "); got != "global> <global" {
		t.Fatalf("unscoped trace = %s", got)
	}
}

func TestPRM6_ListenerMayShortCircuit(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{})
	must(t)(r.OnAssemble(Global, func(_ context.Context, a Assembly, _ Next) (Assembly, error) {
		a.Sections = []SectionText{{Name: "only", Text: "Short."}}
		return a, nil
	}))
	inner := false
	must(t)(r.OnAssemble(Global, func(ctx context.Context, a Assembly, next Next) (Assembly, error) {
		inner = true
		return next(ctx, a)
	}))
	if res := assemble(t, r, Input{}); res.System != "Short." || inner {
		t.Fatalf("System = %q, inner listener ran = %v", res.System, inner)
	}
}

func TestPRM6_CompleteSectionBecomesTheOnlySection(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{Persona: "Persona."})
	must(t)(r.Tools(Global, staticTools("echo")))
	must(t)(r.Variable(Global, "name", constVar("Ada")))
	must(t)(r.Section(Global, Section{Name: "guide", Order: 100, Text: "Guide."}))
	must(t)(r.Section("preset", Section{Name: "custom", Order: 50, Text: "You are {{name}}.", Complete: true}))
	must(t)(r.OnAssemble(Global, func(ctx context.Context, a Assembly, next Next) (Assembly, error) {
		a.Sections = append(a.Sections, SectionText{Name: "late", Text: "Late."})
		return next(ctx, a)
	}))
	res := assemble(t, r, Input{Chain: Chain{"preset"}})
	if res.System != "You are Ada." || sectionNames(res.Sections) != "custom" || toolNamesOf(res.Tools) != "echo" {
		t.Fatalf("System = %q, sections = %s, tools = %s", res.System, sectionNames(res.Sections), toolNamesOf(res.Tools))
	}
	if got := assemble(t, r, Input{}).System; got != IdentityText+"\n\nPersona.\n\nGuide.\n\nLate." {
		t.Fatalf("without the preset System = %q", got)
	}
}

func TestPRM6_MoreThanOneCompleteSectionRejects(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{})
	must(t)(r.Section(Global, Section{Name: "one", Text: "1", Complete: true}))
	must(t)(r.Section("s", Section{Name: "two", Text: "2", Complete: true}))
	ae := assembleErr(t, r, Input{Chain: Chain{"s"}}, ErrMultipleComplete)
	if !strings.HasSuffix(ae.Error(), `: "one", "two"`) {
		t.Fatalf("error = %q", ae.Error())
	}
	// A scoped non-complete section that shadows a complete one leaves one complete in effect.
	must(t)(r.Section("t", Section{Name: "one", Text: "plain"}))
	must(t)(r.Section("t", Section{Name: "two", Text: "2", Complete: true}))
	if got := assemble(t, r, Input{Chain: Chain{"t"}}).System; got != "2" {
		t.Fatalf("System = %q", got)
	}
}

func TestPRM6_RuntimeContextSuppression(t *testing.T) {
	t.Parallel()
	addsContext := func(ctx context.Context, a Assembly, next Next) (Assembly, error) {
		a.Contexts = append(a.Contexts, SectionText{Name: "listener", Text: "From a listener."})
		return next(ctx, a)
	}
	t.Run("config", func(t *testing.T) {
		t.Parallel()
		r := newRegistry(t, Config{IncludeRuntimeContext: new(false)})
		must(t)(r.RuntimeContext(Global, ContextEntry{Name: "clock", Text: "Noon."}))
		must(t)(r.OnAssemble(Global, addsContext))
		if snap := assemble(t, r, Input{}).RuntimeContext; snap.Text != "" || snap.Sections != nil {
			t.Fatalf("snapshot = %+v", snap)
		}
	})
	t.Run("scoped suppressor", func(t *testing.T) {
		t.Parallel()
		r := newRegistry(t, Config{})
		must(t)(r.RuntimeContext(Global, ContextEntry{Name: "clock", Text: "Noon."}))
		must(t)(r.OnAssemble(Global, addsContext))
		stop := must(t)(r.SuppressRuntimeContext("preset"))
		if snap := assemble(t, r, Input{Chain: Chain{"preset", "session"}}).RuntimeContext; snap.Text != "" {
			t.Fatalf("suppressed snapshot = %q", snap.Text)
		}
		if got := assemble(t, r, Input{Chain: Chain{"other"}}).RuntimeContext.Names(); strings.Join(got, ",") != "clock,listener" {
			t.Fatalf("other scope contexts = %v", got)
		}
		stop()
		if got := assemble(t, r, Input{Chain: Chain{"preset"}}).RuntimeContext.Names(); len(got) != 2 {
			t.Fatalf("contexts after disposing the suppressor = %v", got)
		}
	})
}

func TestPRM8_AssemblyFailuresAreAssemblyErrors(t *testing.T) {
	t.Parallel()
	failing := errors.New("boom")
	cases := map[string]func(t *testing.T, r *Registry) (Input, error){
		"bad toolOrder": func(*testing.T, *Registry) (Input, error) {
			return Input{ToolOrder: []string{"x"}}, ErrInvalidToolOrder
		},
		"unknown variable": func(t *testing.T, r *Registry) (Input, error) {
			must(t)(r.Section(Global, Section{Name: "s", Text: "{{nope}}"}))
			return Input{}, ErrUnknownVariable
		},
		"listener error": func(t *testing.T, r *Registry) (Input, error) {
			must(t)(r.OnAssemble(Global, func(context.Context, Assembly, Next) (Assembly, error) { return Assembly{}, failing }))
			return Input{}, failing
		},
		"context text error": func(t *testing.T, r *Registry) (Input, error) {
			must(t)(r.RuntimeContext(Global, ContextEntry{Name: "c", TextFunc: func(context.Context, Input) (string, error) { return "", failing }}))
			return Input{}, failing
		},
		"malformed context": func(t *testing.T, r *Registry) (Input, error) {
			must(t)(r.RuntimeContext(Global, ContextEntry{Name: "c", Text: "{{ x }}"}))
			return Input{}, ErrMalformedReference
		},
		"no code runtime": func(*testing.T, *Registry) (Input, error) { return Input{Mode: ModeCode}, ErrCodeRuntime },
	}
	for name, setup := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := newRegistry(t, Config{})
			in, target := setup(t, r)
			res, err := r.Assemble(context.Background(), in)
			var ae *AssemblyError
			if !errors.As(err, &ae) || !errors.Is(err, target) {
				t.Fatalf("Assemble error = %v; want an *AssemblyError matching %v", err, target)
			}
			if res.System != "" || res.Tools != nil || res.Sections != nil {
				t.Fatalf("Assemble result = %+v, want zero", res)
			}
		})
	}
	r := newRegistry(t, Config{})
	must(t)(r.Section(Global, Section{Name: "x"}))
	_, err := r.Section(Global, Section{Name: "x"})
	var ae *AssemblyError
	if err == nil || errors.As(err, &ae) {
		t.Fatalf("registration error %v must not be an *AssemblyError", err)
	}
}

func TestPRM6_DisposedListenerStopsRunning(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{IncludeHarnessIdentity: new(false)})
	stop := must(t)(r.OnAssemble("s", func(ctx context.Context, a Assembly, next Next) (Assembly, error) {
		a.Sections = append(a.Sections, SectionText{Name: "l", Text: "L"})
		return next(ctx, a)
	}))
	if got := assemble(t, r, Input{Chain: Chain{"s"}}).System; got != "L" {
		t.Fatalf("System = %q", got)
	}
	stop()
	stop()
	if got := assemble(t, r, Input{Chain: Chain{"s"}}).System; got != "" {
		t.Fatalf("System after dispose = %q", got)
	}
}

// TestRegistryConcurrentUse runs assemblies while registrations come and go; run it with -race.
func TestRegistryConcurrentUse(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{Persona: "{{model}}"})
	must(t)(r.Tools(Global, staticTools("a", "b")))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			scope := []string{"x", "y"}[i%2]
			d1, err1 := r.Section(scope, Section{Name: "s", Order: float64(i), Text: "S"})
			d2, err2 := r.Tools(scope, staticTools("c"))
			d3, err3 := r.RuntimeContext(Global, ContextEntry{Name: "c", Text: "C"})
			if err := errors.Join(err1, err2, err3); err != nil {
				t.Errorf("register: %v", err)
				return
			}
			d1()
			d2()
			d3()
		}
	}()
	for range 200 {
		res := assemble(t, r, Input{Chain: Chain{"x", "y"}, Model: "m"})
		if !strings.HasPrefix(toolNamesOf(res.Tools), "a,b") {
			t.Fatalf("tools = %s", toolNamesOf(res.Tools))
		}
	}
	<-done
}
