package registry

import "testing"

func TestPIPE12_RawToolSuccess(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	runs := 0
	e.register(e.g, rawTool("echo", `"hi"`, &runs))
	r := e.exec("echo", `{}`)
	if r.IsError || string(r.Value) != `"hi"` || contentText(r) != "hi" || runs != 1 {
		t.Fatalf("got %+v runs=%d", r, runs)
	}
}
