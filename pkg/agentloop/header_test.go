package agentloop

import (
	"testing"

	"github.com/dshd/dshd/pkg/eventlog"
	et "github.com/dshd/dshd/pkg/eventlog/eventlogtest"
)

// TestSES13_HeaderInForceIsTheLastRequestHeader: the header in force is the last request/header
// folded, in canonical form (an empty tool list dropped), while this runner has none staged; a
// header the runner staged but has not written yet is in force until it is committed.
func TestSES13_HeaderInForceIsTheLastRequestHeader(t *testing.T) {
	t.Parallel()
	r := &Runner{m: newMirror()}
	if r.headerInForce() != nil {
		t.Fatal("a log without request/header has a header in force")
	}
	l := eventlog.NewLog(nil)
	evs := et.MustAppend(t, l, et.TurnStart(1),
		et.Raw("request/header", `{"header":{"config":{"provider":"p","model":"m1"},"system":""},"reason":"initial"}`),
		et.Raw("request/header", `{"header":{"config":{"provider":"p","model":"m2"},"tools":[]},"reason":"change"}`))
	if err := r.m.fold(evs); err != nil {
		t.Fatal(err)
	}
	h := r.headerInForce()
	if h == nil || h.Config.Model != "m2" || h.Tools != nil {
		t.Fatalf("header in force = %+v", h)
	}

	staged := h.Canonical()
	staged.Config.Model = "m3"
	r.stagedHeader = &stagedHeader{m: staged, h: &handle{seq: -1}}
	if got := r.headerInForce(); got == nil || got.Config.Model != "m3" {
		t.Fatalf("header in force with one staged = %+v", got)
	}
	r.stagedHeader.h.seq = 3 // committed: the log is the authority again
	if got := r.headerInForce(); got == nil || got.Config.Model != "m2" {
		t.Fatalf("header in force after the staged one committed = %+v", got)
	}
}
