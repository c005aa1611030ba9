package main

import (
	"strings"
	"testing"
)

func TestReadSSE(t *testing.T) {
	t.Parallel()
	stream := ": heartbeat\n\n" +
		"id: 0\nevent: turn/start\ndata: {\"seq\":0}\n\n" +
		"id: 1\nevent: assistant/message\ndata: {\"seq\":1,\ndata: \"x\":2}\n\n" +
		"id: 2\nevent: turn/end\ndata: {\"data\":{\"reason\":{\"kind\":\"completed\"}}}\n\n"
	res, last, err := readSSE(strings.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	if res.Events != 3 || res.Steps != 1 || last != "turn/end" || !strings.Contains(res.End, `"completed"`) {
		t.Fatalf("got %+v last %q", res, last)
	}
}
