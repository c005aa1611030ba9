package promptasm

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dshd/dshd/pkg/llm"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// fixtureRegistry is a typical deployment: identity, a persona with variables, tool guidance,
// four tools and two runtime-context entries. Used by the golden tests and the benchmark.
func fixtureRegistry(t testing.TB) *Registry {
	r := newRegistry(t, Config{Persona: "You help with the repository in {{cwd}}. You run as {{model}} via {{provider}}."})
	reg := must(t)
	reg(r.Section(Global, Section{Name: "tool:bash", Order: 100, Text: "Prefer `bash` for process work; it runs in {{cwd}}."}))
	reg(r.Section(Global, Section{Name: "tool:read", Order: 101, Text: "Read a file before you edit it."}))
	reg(r.Section(Global, Section{Name: "tool:unused", Order: 102}))
	reg(r.Section(Global, Section{Name: "policy", Order: 50, TextFunc: func(_ context.Context, in Input) (string, error) {
		return "Presentation: " + string(in.Mode) + ".", nil
	}}))
	reg(r.Variable(Global, "team", constVar("platform")))
	reg(r.Tools(Global, func(context.Context, Input) (ToolSet, error) {
		return ToolSet{Schemas: []llm.ToolSchema{
			{Name: "write", Description: "Write a file.", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"}},"required":["path","content"]}`)},
			{Name: "read", Description: "Read a file.", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)},
			{Name: "bash", Description: "Run a shell command.", Parameters: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}`)},
			{Name: "echo", Description: "Echo the text back.", Parameters: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`)},
		}}, nil
	}))
	reg(r.RuntimeContext(Global, ContextEntry{Name: "clock", Order: 10, Text: "The time is 2026-01-02T15:04:05Z."}))
	reg(r.RuntimeContext(Global, ContextEntry{Name: "git", Order: 20, Text: "Team {{team}}; branch main, clean."}))
	reg(r.Section("custom", Section{Name: "custom:prompt", Order: 1, Text: "You are the {{team}} release bot.", Complete: true}))
	return r
}

func fixtureInput(mode Mode) Input {
	in := Input{Provider: "openai", Model: "deepseek-chat", CWD: "/work/repo", Mode: mode}
	if mode != ModeNative {
		in.CodeRuntime = tsRuntime()
	}
	return in
}

func TestPRM7_GoldenPrompts(t *testing.T) {
	t.Parallel()
	ordered := fixtureInput(ModeNative)
	ordered.ToolOrder = []string{"write", ToolOrderRest, "bash"}
	complete := fixtureInput(ModeNative)
	complete.Chain = Chain{"custom"}
	cases := map[string]Input{
		"native":         fixtureInput(ModeNative),
		"native-ordered": ordered,
		"code":           fixtureInput(ModeCode),
		"both":           fixtureInput(ModeBoth),
		"complete":       complete,
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			res := assemble(t, fixtureRegistry(t), in)
			checkGolden(t, filepath.Join("testdata", "golden", name+".golden"), goldenText(t, res))
		})
	}
}

// goldenText lays a Result out for review: the system prompt, one wire tool per line, the
// runtime-context snapshot.
func goldenText(t *testing.T, res Result) string {
	var b strings.Builder
	b.WriteString("== system\n" + res.System + "\n== tools\n")
	for _, tool := range res.Tools {
		line, err := json.Marshal(tool)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	b.WriteString("== runtime context\n" + res.RuntimeContext.Text + "\n")
	return b.String()
}

func checkGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./pkg/promptasm -run Golden -update)", err)
	}
	if got != string(want) {
		t.Fatalf("%s differs from the rendered prompt:\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}
