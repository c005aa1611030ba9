package promptasm

import (
	"context"
	"errors"
	"math"
	"testing"
)

func TestPRM1_BuiltInSections(t *testing.T) {
	t.Parallel()
	t.Run("identity by default, empty persona dropped", func(t *testing.T) {
		t.Parallel()
		res := assemble(t, newRegistry(t, Config{}), Input{})
		if res.System != IdentityText {
			t.Fatalf("System = %q, want %q", res.System, IdentityText)
		}
		if got := sectionNames(res.Sections); got != SectionIdentity {
			t.Fatalf("sections = %s, want %s", got, SectionIdentity)
		}
	})
	t.Run("identity at -100 before persona at 0", func(t *testing.T) {
		t.Parallel()
		r := newRegistry(t, Config{Persona: "Be brief."})
		must(t)(r.Section(Global, Section{Name: "early", Order: -50, Text: "Early."}))
		res := assemble(t, r, Input{})
		if want := IdentityText + "\n\nEarly.\n\nBe brief."; res.System != want {
			t.Fatalf("System = %q, want %q", res.System, want)
		}
		if res.Sections[0].Order != -100 || res.Sections[2].Order != 0 {
			t.Fatalf("orders = %v, %v", res.Sections[0].Order, res.Sections[2].Order)
		}
	})
	t.Run("identity disabled", func(t *testing.T) {
		t.Parallel()
		res := assemble(t, newRegistry(t, Config{IncludeHarnessIdentity: new(false), Persona: "Be brief."}), Input{})
		if res.System != "Be brief." {
			t.Fatalf("System = %q", res.System)
		}
	})
	t.Run("a scoped persona shadows the deployment persona", func(t *testing.T) {
		t.Parallel()
		r := newRegistry(t, Config{IncludeHarnessIdentity: new(false), Persona: "Deployment."})
		must(t)(r.Section("preset", Section{Name: SectionPersona, Text: "Preset."}))
		if got := assemble(t, r, Input{Chain: Chain{"preset"}}).System; got != "Preset." {
			t.Fatalf("scoped System = %q", got)
		}
		if got := assemble(t, r, Input{}).System; got != "Deployment." {
			t.Fatalf("global System = %q", got)
		}
		if _, err := r.Section(Global, Section{Name: SectionPersona, Text: "x"}); !errors.Is(err, ErrDuplicate) {
			t.Fatalf("global persona re-registration err = %v, want ErrDuplicate", err)
		}
	})
}

func TestPRM2_SectionValidation(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{})
	for _, order := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if _, err := r.Section(Global, Section{Name: "x", Order: order}); !errors.Is(err, ErrInvalidOrder) {
			t.Errorf("order %v: err = %v, want ErrInvalidOrder", order, err)
		}
	}
	if _, err := r.Section(Global, Section{Order: 1}); !errors.Is(err, ErrInvalidName) {
		t.Errorf("empty name: err = %v, want ErrInvalidName", err)
	}
	must(t)(r.Section(Global, Section{Name: "dup", Text: "a"}))
	if _, err := r.Section(Global, Section{Name: "dup", Text: "b"}); !errors.Is(err, ErrDuplicate) {
		t.Errorf("global duplicate: err = %v, want ErrDuplicate", err)
	}
	must(t)(r.Section("s", Section{Name: "dup", Text: "c"}))
	if _, err := r.Section("s", Section{Name: "dup", Text: "d"}); !errors.Is(err, ErrDuplicate) {
		t.Errorf("scoped duplicate: err = %v, want ErrDuplicate", err)
	}
}

func TestPRM2_ScopedSectionShadowsGlobal(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{IncludeHarnessIdentity: new(false)})
	must(t)(r.Section("agent", Section{Name: "guide", Order: 100, Text: "Scoped guide."}))
	must(t)(r.Section(Global, Section{Name: "guide", Order: 100, Text: "Global guide."}))
	must(t)(r.Section("preset", Section{Name: "guide", Order: 100, Text: "Preset guide."}))
	cases := map[string]struct {
		chain Chain
		want  string
	}{
		"global only":             {nil, "Global guide."},
		"other scope":             {Chain{"other"}, "Global guide."},
		"preset":                  {Chain{"preset"}, "Preset guide."},
		"nearest of preset→agent": {Chain{"preset", "agent"}, "Scoped guide."},
		"nearest of agent→preset": {Chain{"agent", "preset"}, "Preset guide."},
	}
	for name, tc := range cases {
		if got := assemble(t, r, Input{Chain: tc.chain}).System; got != tc.want {
			t.Errorf("%s: System = %q, want %q", name, got, tc.want)
		}
	}
}

func TestPRM2_SortedByOrderTiesKeepRegistrationOrder(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{IncludeHarnessIdentity: new(false)})
	must(t)(r.Section(Global, Section{Name: "a", Order: 10, Text: "A"}))
	must(t)(r.Section(Global, Section{Name: "b", Order: 5, Text: "B"}))
	must(t)(r.Section(Global, Section{Name: "c", Order: 10, Text: "C"}))
	must(t)(r.Section("s", Section{Name: "d", Order: 10, Text: "D"}))
	must(t)(r.Section(Global, Section{Name: "e", Order: -1.5, Text: "E"}))
	res := assemble(t, r, Input{Chain: Chain{"s"}})
	if got := sectionNames(res.Sections); got != "e,b,a,c,d" {
		t.Fatalf("sections = %s, want e,b,a,c,d", got)
	}
}

func TestPRM2_TextFuncEvaluatedOnEveryAssembly(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{IncludeHarnessIdentity: new(false)})
	calls := 0
	must(t)(r.Section(Global, Section{Name: "n", TextFunc: func(_ context.Context, in Input) (string, error) {
		calls++
		return in.Model + " call", nil
	}}))
	first := assemble(t, r, Input{Model: "m1"}).System
	second := assemble(t, r, Input{Model: "m2"}).System
	if first != "m1 call" || second != "m2 call" || calls != 2 {
		t.Fatalf("got %q, %q after %d calls", first, second, calls)
	}
	must(t)(r.Section(Global, Section{Name: "bad", TextFunc: func(context.Context, Input) (string, error) {
		return "", errors.New("disk gone")
	}}))
	if ae := assembleErr(t, r, Input{}, nil); ae.Error() != `assemble system prompt: prompt section "bad": disk gone` {
		t.Fatalf("error = %q", ae.Error())
	}
}

func TestPRM2_DisposeRemovesExactlyOnce(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{IncludeHarnessIdentity: new(false)})
	dispose := must(t)(r.Section("s", Section{Name: "x", Text: "X"}))
	must(t)(r.Section("s", Section{Name: "y", Text: "Y"}))
	dispose()
	dispose()
	if got := assemble(t, r, Input{Chain: Chain{"s"}}).System; got != "Y" {
		t.Fatalf("System = %q, want Y", got)
	}
	must(t)(r.Section("s", Section{Name: "x", Text: "X2"}))
	if got := assemble(t, r, Input{Chain: Chain{"s"}}).System; got != "Y\n\nX2" {
		t.Fatalf("System = %q after re-registration", got)
	}
}
