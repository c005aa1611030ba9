package scheduler

import (
	"context"
	"testing"

	"github.com/dshd/dshd/pkg/registry"
)

// stepEnder is the fake emitter with the StepEnder extension.
type stepEnder struct {
	*fakeEmitter
	outs []Outcome
}

func (e *stepEnder) StepEnd(ctx context.Context, out Outcome) error {
	done, err := e.enter(ctx, "stepend")
	defer done()
	e.outs = append(e.outs, out)
	return err
}

func TestSCHED4_StepEnderReplacesFinalFlushAndSeesModes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{})
	h.set("x", spec{exclusive: true})
	se := &stepEnder{fakeEmitter: h.em}
	out, err := h.sched.RunStep(context.Background(), testStep, callsOf("p1", "p2", "x"), se)
	if err != nil {
		t.Fatal(err)
	}
	tr := h.tr.all()
	if tr[len(tr)-1] != "stepend" || len(se.outs) != 1 {
		t.Fatalf("trace %v: the step must end with StepEnd and no final flush", tr)
	}
	want := []registry.Mode{registry.Parallel, registry.Parallel, registry.Exclusive}
	for i, r := range out.Results {
		if r.Call.Mode != want[i] || se.outs[0].Results[i].Call.Mode != want[i] {
			t.Fatalf("call %s: mode %v, want %v", r.Call.ID, r.Call.Mode, want[i])
		}
	}
}
