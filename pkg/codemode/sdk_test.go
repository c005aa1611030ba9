package codemode_test

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dshd/dshd/pkg/codemode"
	"github.com/dshd/dshd/pkg/promptasm"
	"github.com/dshd/dshd/pkg/registry"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Fatalf("%s differs (run with -update to accept):\n%s", name, got)
	}
}

// exoticTools cover the CODE-3 rendering rules: quoted names, doc comments with `*/`, open and
// closed objects, enums, const, oneOf, nested arrays, and nodes outside the subset.
func exoticTools() []*registry.Tool {
	return []*registry.Tool{
		rawTool("my-tool", "Has a dash.\nAnd a second line; it ends */ here.", `{"type":"object","properties":{
			"mode":{"type":"string","enum":["fast","slow"],"description":"How to go."},
			"level":{"const":3},
			"tags":{"type":"array","items":{"type":"string"}},
			"pairs":{"type":"array","items":{"type":"object","properties":{"k":{"type":"string"}},"required":["k"],"additionalProperties":false}},
			"either":{"oneOf":[{"type":"string"},{"type":"number"}]},
			"any":{"description":"Anything."},
			"weird":{"$ref":"#/defs/x"},
			"strict":{"type":"object","additionalProperties":false},
			"open":{"type":"object"},
			"with space":{"type":"boolean"}
		},"required":["mode","with space"]}`,
			`{"type":"object","properties":{"ok":{"type":"boolean"},"items":{"type":"array"}},"required":["ok"],"additionalProperties":false}`),
		rawTool("Zeta", "Upper case sorts first in code-unit order.", "", `{"type":"integer"}`),
		rawTool("_private", "", `{"type":"object","properties":{"n":{"type":"null"}}}`, `{"oneOf":[{"type":"string"},{"type":"null"}]}`),
	}
}

func TestCODE3_SDKGolden(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		extra []*registry.Tool
	}{
		{"sdk_demo.golden", nil},
		{"sdk_exotic.golden", exoticTools()},
	} {
		fx := newFixture(t, registry.ModeCode, codemode.Config{}, c.extra...)
		pr := fx.rt.PromptRuntime(fx.reg)
		schemas, err := fx.reg.Schemas(agentScope)
		if err != nil {
			t.Fatal(err)
		}
		in := promptasm.Input{Chain: promptasm.Chain{agentScope}}
		sdk, err := pr.RenderSDKFunc(context.Background(), in, schemas)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := pr.RenderSDKFunc(context.Background(), in, schemas)
		if sdk != again {
			t.Fatal("the SDK must be byte-identical for an unchanged tool set")
		}
		if !strings.HasPrefix(sdk, codemode.SDKInstructions) || strings.Contains(sdk, "run_code:") {
			t.Fatalf("instructions first, no run_code:\n%s", sdk)
		}
		golden(t, c.name, sdk)
	}
	if got := codemode.RenderSDK(nil, nil); !strings.Contains(got, "interface ToolArgsMap {}") {
		t.Fatalf("empty tool set:\n%s", got)
	}
}
