package promptasm

import (
	"fmt"
	"strings"
	"testing"
)

// TestFinding11_AssemblyErrorsEchoLittle (issue 9, finding 11): an assembly error, written to
// the log on every turn, repeats a few of the names it is about, each clipped: a toolOrder of
// many unknown names, a reference to a huge unknown name, many registered variables.
func TestFinding11_AssemblyErrorsEchoLittle(t *testing.T) {
	t.Parallel()
	r := newRegistry(t, Config{})
	order := []string{ToolOrderRest}
	for i := range 1000 {
		order = append(order, fmt.Sprintf("ghost_%d_%s", i, strings.Repeat("x", 200)))
	}
	ae := assembleErr(t, r, Input{ToolOrder: order}, ErrUnknownTool)
	if msg := ae.Error(); len(msg) > 1024 || !strings.Contains(msg, "and 990 more") || !strings.Contains(msg, "…") {
		t.Fatalf("%d bytes: %.300s", len(msg), msg)
	}

	var b Bundle
	for i := range 300 {
		b.Variables = append(b.Variables, bundleOf(1).Variables[0])
		b.Variables[i].Name = fmt.Sprintf("v%03d", i)
	}
	b.Sections = []Section{{Name: strings.Repeat("s", 10000), Order: 1, Text: "{{" + strings.Repeat("u", 10000) + "}}"}}
	must(t)(r.RegisterBundle("p", b))
	ae = assembleErr(t, r, Input{Chain: Chain{"p"}}, ErrUnknownVariable)
	if msg := ae.Error(); len(msg) > 1024 || !strings.Contains(msg, "v000, v001") || !strings.Contains(msg, "more") {
		t.Fatalf("%d bytes: %.300s", len(msg), msg)
	}
}
