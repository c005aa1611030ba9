package eventlog

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzLosslessJSON: what losslessJSON accepts is valid JSON, and it returns exactly its compact
// form, in a slice of its own.
func FuzzLosslessJSON(f *testing.F) {
	for _, s := range []string{
		`{"turn":1}`, " { \"a\" : [ 1 , 2.5e3 , \"x\\n\" ] , \"b\" : null }\n", `{"a":1,"a":2}`,
		`{"a":1,"\u0061":2}`, `{"a":-0}`, `{"s":"\ud83d\ude00"}`, `{"s":"\ud800"}`, `[1,{"k":{}}]`,
		`{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":10,"k11":11,"k12":12,"k13":13,"k14":14,"k15":15,"k16":16,"k1":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := losslessJSON(b)
		if err != nil {
			return
		}
		if !json.Valid(b) {
			t.Fatalf("accepted invalid JSON %q", b)
		}
		var want bytes.Buffer
		if err := json.Compact(&want, b); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, want.Bytes()) {
			t.Fatalf("%q: got %q, want %q", b, out, want.Bytes())
		}
		if len(out) > 0 && &out[0] == &b[0] {
			t.Fatal("the result shares the input's bytes")
		}
	})
}

// TestLosslessJSONDuplicateKeysInLargeObjects: the duplicate check holds past the objects it
// compares key by key.
func TestLosslessJSONDuplicateKeysInLargeObjects(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	b.WriteString("{")
	for i := range 40 {
		b.WriteString(`"k` + string(rune('a'+i%26)) + string(rune('a'+i/26)) + `":1,`)
	}
	ok := b.String() + `"z":1}`
	if _, err := losslessJSON([]byte(ok)); err != nil {
		t.Fatalf("40 distinct keys refused: %v", err)
	}
	for _, dup := range []string{`"kaa":2}`, `"kzа":2,"kzа":3}`, `"k\u0061a":2}`} {
		if _, err := losslessJSON([]byte(b.String() + dup)); err == nil {
			t.Fatalf("duplicate %s accepted", dup)
		}
	}
}
