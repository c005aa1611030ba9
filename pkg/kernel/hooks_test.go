package kernel

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

func TestKRN4_WaterfallOrderPrependAndShortCircuit(t *testing.T) {
	t.Parallel()
	w := NewWaterfall("w", func(_ context.Context, in string) (string, error) { return in + "|default", nil })
	wrap := func(tag string) WaterfallFunc[string, string] {
		return func(ctx context.Context, in string, next func(context.Context) (string, error)) (string, error) {
			out, err := next(ctx)
			return tag + "(" + out + ")", err
		}
	}
	w.On(wrap("a"))
	w.On(wrap("b"))
	w.On(wrap("p"), Prepend())
	got, err := w.Run(context.Background(), nil, "x")
	if err != nil || got != "p(a(b(x|default)))" {
		t.Fatalf("got %q, %v", got, err)
	}
	d := w.On(func(context.Context, string, func(context.Context) (string, error)) (string, error) {
		return "short", nil
	}, Prepend())
	if got, _ := w.Run(context.Background(), nil, "x"); got != "short" {
		t.Fatalf("short circuit: got %q", got)
	}
	d()
	d()
	if got, _ := w.Run(context.Background(), nil, "x"); got != "p(a(b(x|default)))" {
		t.Fatalf("after dispose: got %q", got)
	}
}

func TestKRN4_WaterfallNextPassesContext(t *testing.T) {
	t.Parallel()
	type key struct{}
	w := NewWaterfall("w", func(ctx context.Context, _ int) (any, error) { return ctx.Value(key{}), nil })
	w.On(func(ctx context.Context, _ int, next func(context.Context) (any, error)) (any, error) {
		return next(context.WithValue(ctx, key{}, "wrapped"))
	})
	if got, _ := w.Run(context.Background(), nil, 0); got != "wrapped" {
		t.Fatalf("got %v", got)
	}
}

func TestKRN4_SerialFirstNonZeroWins(t *testing.T) {
	t.Parallel()
	s := NewSerial[int, string]("s")
	calls := 0
	s.On(func(context.Context, int) (string, error) { calls++; return "", nil })
	s.On(func(_ context.Context, in int) (string, error) { calls++; return "second", nil })
	s.On(func(context.Context, int) (string, error) { calls++; return "third", nil })
	got, err := s.Run(context.Background(), nil, 1)
	if err != nil || got != "second" || calls != 2 {
		t.Fatalf("got %q %v calls=%d", got, err, calls)
	}
	e := NewSerial[int, string]("empty")
	if got, err := e.Run(context.Background(), nil, 1); got != "" || err != nil {
		t.Fatalf("empty serial: %q %v", got, err)
	}
}

func TestKRN7_EmitContainsEachListener(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	e := NewEmit[string]("tools/result", log)
	var seen []string
	e.On(func(context.Context, string) error { panic("boom") })
	e.On(func(context.Context, string) error { return errors.New("bad") })
	e.On(func(_ context.Context, in string) error { seen = append(seen, in); return nil })
	e.Notify(context.Background(), nil, "ev")
	if len(seen) != 1 {
		t.Fatalf("third listener not reached: %v", seen)
	}
	if out := buf.String(); !strings.Contains(out, "boom") || !strings.Contains(out, "bad") {
		t.Fatalf("failures not logged: %s", out)
	}
	if err := e.Emit(context.Background(), nil, "ev"); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("Emit should stop at the first failure, got %v", err)
	}
}

func TestSCP7_ScopedListenerRouting(t *testing.T) {
	t.Parallel()
	tree := NewScopeTree()
	preset, _ := tree.Declare("preset:x", nil)
	agent, _ := tree.Declare("agent:y", preset)
	other, _ := tree.Declare("agent:z", nil)
	e := NewEmit[string]("ev", nil)
	got := map[string][]string{}
	rec := func(name string) EmitFunc[string] {
		return func(_ context.Context, in string) error { got[name] = append(got[name], in); return nil }
	}
	e.On(rec("unscoped"))
	e.On(rec("preset"), InScope(preset))
	e.On(rec("agent"), InScope(agent))
	e.On(rec("global"), InScope(other), Global())
	e.Notify(context.Background(), agent, "a")
	e.Notify(context.Background(), preset, "p")
	e.Notify(context.Background(), other, "o")
	e.Notify(context.Background(), nil, "none")
	want := map[string]string{
		"unscoped": "a,p,o,none", "preset": "a,p", "agent": "a", "global": "a,p,o,none",
	}
	for k, v := range want {
		if g := strings.Join(got[k], ","); g != v {
			t.Errorf("%s got %q want %q", k, g, v)
		}
	}
	u := NewUnfilteredEmit[string]("change", nil)
	n := 0
	u.On(func(context.Context, string) error { n++; return nil }, InScope(agent))
	u.Notify(context.Background(), nil, "x")
	if n != 1 {
		t.Fatalf("unfiltered emit skipped a scoped listener")
	}
}

func TestSCP1_ScopeTreeChain(t *testing.T) {
	t.Parallel()
	tree := NewScopeTree()
	p, _ := tree.Declare("preset:x", nil)
	a, _ := tree.Declare("agent:y", p)
	c, _ := tree.Declare("agent:child", a)
	if again, err := tree.Declare("agent:y", p); err != nil || again != a {
		t.Fatalf("redeclare: %v", err)
	}
	if _, err := tree.Declare("agent:y", nil); err == nil {
		t.Fatal("redeclare under another parent must fail")
	}
	chain := c.Chain()
	if len(chain) != 3 || chain[0] != c || chain[2] != p {
		t.Fatalf("chain %v", chain)
	}
	if !c.Within(p) || p.Within(c) || !c.Within(c) {
		t.Fatal("Within wrong")
	}
	if s, ok := tree.Lookup("nope"); ok || s.Key() != "nope" || s.Parent() != nil {
		t.Fatal("unknown lookup")
	}
	if s, ok := tree.Lookup(""); !ok || s != nil {
		t.Fatal("empty key must be unscoped")
	}
}
