package eventlog

import "testing"

// TestPayloadsListsEveryKind: Payloads holds one payload of each kind with a payload type, sorted,
// each of a known kind that DecodePayload decodes.
func TestPayloadsListsEveryKind(t *testing.T) {
	ps := Payloads()
	if len(ps) != len(kinds) {
		t.Fatalf("Payloads holds %d payloads, kinds %d", len(ps), len(kinds))
	}
	for i, p := range ps {
		if i > 0 && ps[i-1].Type() >= p.Type() {
			t.Errorf("Payloads is not sorted by kind: %s before %s", ps[i-1].Type(), p.Type())
		}
		if !KnownType(p.Type()) {
			t.Errorf("%s has a payload type but is not a known kind", p.Type())
		}
		if _, err := DecodePayload(p.Type(), []byte(`{}`)); err != nil {
			t.Errorf("%s: %v", p.Type(), err)
		}
	}
}
