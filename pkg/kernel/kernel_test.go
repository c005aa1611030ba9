package kernel

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestKRN1_ProvideDuplicateAndScopedLookup(t *testing.T) {
	t.Parallel()
	k := New(nil)
	a := k.Fiber("a", nil)
	if _, err := a.Provide("db", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Fiber("b", nil).Provide("db", 2); err == nil || !strings.Contains(err.Error(), `"db" is already provided`) {
		t.Fatalf("duplicate provide: %v", err)
	}
	s, _ := k.Scopes().Declare("tenant:t", nil)
	if _, err := k.Fiber("c", s).Provide("db", 3); err != nil {
		t.Fatalf("same name in another scope: %v", err)
	}
	if v, _ := Get[int](k, "db", s); v != 3 {
		t.Fatalf("scoped lookup got %v", v)
	}
	a.Dispose()
	if v, ok := Get[int](k, "db", nil); ok {
		t.Fatalf("service survived its fiber: %v", v)
	}
}

func TestKRN2_LoadInDependencyOrder(t *testing.T) {
	t.Parallel()
	k := New(nil)
	var order []string
	p := func(name string, deps []string, provides string) Plugin {
		return Plugin{Name: name, Deps: deps, Apply: func(_ context.Context, f *Fiber) error {
			order = append(order, name)
			if provides != "" {
				_, err := f.Provide(provides, name)
				return err
			}
			return nil
		}}
	}
	err := k.Load(context.Background(), p("loop", []string{"tools", "llm"}, ""), p("tools", []string{"llm"}, "tools"), p("llm", nil, "llm"))
	if err != nil || strings.Join(order, ",") != "llm,tools,loop" {
		t.Fatalf("order %v err %v", order, err)
	}
	k.Close()
	if _, ok := k.Service("llm", nil); ok {
		t.Fatal("Close left services")
	}
}

func TestKRN2_MissingDependencyIsClearError(t *testing.T) {
	t.Parallel()
	k := New(nil)
	err := k.Load(context.Background(), Plugin{Name: "loop", Deps: []string{"approval"}})
	if err == nil || !strings.Contains(err.Error(), `plugin "loop" is missing dependencies "approval"`) {
		t.Fatalf("got %v", err)
	}
}

func TestKRN2_FailedSetupRollsBackInReverse(t *testing.T) {
	t.Parallel()
	k := New(nil)
	var undone []string
	w := NewWaterfall("w", func(context.Context, int) (int, error) { return 0, nil })
	boom := errors.New("boom")
	err := k.Load(context.Background(), Plugin{Name: "bad", Apply: func(_ context.Context, f *Fiber) error {
		if _, err := f.Provide("svc", 1); err != nil {
			return err
		}
		if _, err := Listen(f, w, func(ctx context.Context, in int, next func(context.Context) (int, error)) (int, error) {
			return next(ctx)
		}); err != nil {
			return err
		}
		f.Track(func() { undone = append(undone, "first") })
		f.Track(func() { undone = append(undone, "second") })
		return boom
	}})
	if !errors.Is(err, boom) {
		t.Fatalf("error not propagated: %v", err)
	}
	if strings.Join(undone, ",") != "second,first" {
		t.Fatalf("rollback order %v", undone)
	}
	if _, ok := k.Service("svc", nil); ok || w.Len() != 0 {
		t.Fatal("rollback left registrations")
	}
	err = k.Load(context.Background(), Plugin{Name: "panics", Apply: func(context.Context, *Fiber) error { panic("bad apply") }})
	if err == nil || !strings.Contains(err.Error(), "bad apply") {
		t.Fatalf("panic not turned into error: %v", err)
	}
}

func TestKRN3_EffectsDisposeInReverseOnce(t *testing.T) {
	t.Parallel()
	k := New(nil)
	f := k.Fiber("p", nil)
	var log []string
	d, err := f.Effect(func(add func(Disposer)) error {
		add(func() { log = append(log, "a") })
		add(func() { log = append(log, "b") })
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	d()
	d()
	f.Dispose()
	if strings.Join(log, ",") != "b,a" {
		t.Fatalf("got %v", log)
	}
	log = nil
	_, err = f.Effect(func(add func(Disposer)) error { return nil })
	if !errors.Is(err, ErrInactiveEffect) {
		t.Fatalf("effect on disposed fiber: %v", err)
	}
	g := k.Fiber("q", nil)
	_, err = g.Effect(func(add func(Disposer)) error {
		add(func() { log = append(log, "x") })
		add(func() { log = append(log, "y") })
		return errors.New("setup failed")
	})
	if err == nil || strings.Join(log, ",") != "y,x" {
		t.Fatalf("partial setup not rolled back: %v %v", err, log)
	}
}

func TestKRN5_ListenersAreFiberEffects(t *testing.T) {
	t.Parallel()
	k := New(nil)
	s, _ := k.Scopes().Declare("agent:a", nil)
	f := k.Fiber("p", s)
	e := NewEmit[int]("ev", nil)
	n := 0
	if _, err := Listen(f, e, func(context.Context, int) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	e.Notify(context.Background(), nil, 1) // unscoped event: the scoped listener is skipped
	e.Notify(context.Background(), s, 1)
	if n != 1 {
		t.Fatalf("scoped listener got %d events", n)
	}
	f.Dispose()
	e.Notify(context.Background(), s, 1)
	if n != 1 || e.Len() != 0 {
		t.Fatal("listener survived its fiber")
	}
	if _, err := Listen(f, e, func(context.Context, int) error { return nil }); !errors.Is(err, ErrInactiveEffect) {
		t.Fatalf("listen on disposed fiber: %v", err)
	}
}
