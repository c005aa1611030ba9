package scheduler

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/dshd/dshd/pkg/registry"
)

func TestSCHED1_ParseArguments(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, raw, want string
	}{
		{"empty string becomes an empty object", "", `{}`},
		{"object kept", `{"text":"hi","n":1}`, `{"text":"hi","n":1}`},
		{"whitespace compacted, values untouched", " {\"a\" : [1, 2.50, 1e400]} \n", `{"a":[1,2.50,1e400]}`},
		{"big integer kept exactly", `{"n":12345678901234567890123}`, `{"n":12345678901234567890123}`},
		{"duplicate keys kept for the validator", `{"a":1,"a":2}`, `{"a":1,"a":2}`},
		{"non-object JSON kept", `[1,"x"]`, `[1,"x"]`},
		{"null kept", `null`, `null`},
		{"invalid JSON becomes its string", `{"text":`, `"{\"text\":"`},
		{"plain text becomes its string", `hello <world> & co`, `"hello <world> & co"`},
		{"whitespace only is invalid JSON", "  ", `"  "`},
		{"invalid UTF-8 replaced", "\xff{", "\"\uFFFD{\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := ParseArguments(tt.raw)
			if !json.Valid(got) {
				t.Fatalf("ParseArguments(%q) = %s, not valid JSON", tt.raw, got)
			}
			if string(got) != tt.want {
				t.Errorf("ParseArguments(%q) = %s, want %s", tt.raw, got, tt.want)
			}
		})
	}
}

func TestSCHED1_ParseArgumentsReturnsFreshSlices(t *testing.T) {
	t.Parallel()
	a := ParseArguments("")
	a[0] = 'X'
	if b := ParseArguments(""); string(b) != `{}` {
		t.Fatalf("mutating one result changed another: %s", b)
	}
}

func TestSCHED1_EachCallGetsItsOwnInput(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	calls := []Call{
		{ID: "c1", Name: "echo", Arguments: `{"text":"a"}`},
		{ID: "c2", Name: "echo", Arguments: ``},
		{ID: "c3", Name: "echo", Arguments: `{"text":`},
	}
	if _, err := h.sched.RunStep(context.Background(), testStep, calls, h.em); err != nil {
		t.Fatal(err)
	}
	wantArgs := map[string]string{"c1": `{"text":"a"}`, "c2": `{}`, "c3": `"{\"text\":"`}
	if len(h.pipe.inputs) != 3 {
		t.Fatalf("Prepare saw %d inputs, want 3", len(h.pipe.inputs))
	}
	for i, in := range h.pipe.inputs {
		c := calls[i]
		want := registry.Input{CallID: c.ID, Name: "echo", Scope: "scope-1", Agent: "agent-1",
			Location: registry.Location{Turn: 3, Step: 2}, RootCallID: c.ID}
		got := in
		got.Args = nil
		if !reflect.DeepEqual(got, want) {
			t.Errorf("input %d = %+v, want %+v", i, got, want)
		}
		if string(in.Args) != wantArgs[c.ID] {
			t.Errorf("input %s args = %s, want %s", c.ID, in.Args, wantArgs[c.ID])
		}
	}
	// The raw string, not the parsed value, is what tool/call records.
	if got := h.tr.only("call"); len(got) != 3 {
		t.Errorf("tool/call events = %v", got)
	}
}
