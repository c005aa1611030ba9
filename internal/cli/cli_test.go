package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestSSEReaderSkipsCommentsAndCutFrames(t *testing.T) {
	t.Parallel()
	stream := ": heartbeat\n\n" +
		"id: 0\nevent: turn/start\ndata: {\"type\":\"turn/start\",\"seq\":0,\"time\":1,\"data\":{\"turn\":1}}\n\n" +
		"retry: 1000\n\n" +
		"id: 1\nevent: step/start\ndata: {\"type\":\"step/start\",\"seq\":1,\"time\":1,\"data\":{\"turn\":1,\"step\":1}}\n\n" +
		"id: 2\nevent: step/end\ndata: {\"type\":\"step/end\",\"seq\":2" // cut off: never dispatched
	rd := newSSEReader(strings.NewReader(stream))
	var seqs []int64
	for {
		ev, err := rd.NextEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, ev.Seq)
		if !json.Valid(ev.Raw) {
			t.Fatalf("raw %q", ev.Raw)
		}
	}
	if !reflect.DeepEqual(seqs, []int64{0, 1}) {
		t.Fatalf("seqs %v, want [0 1]", seqs)
	}
}

func TestAddrURL(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"":               "http://127.0.0.1:8080",
		":8080":          "http://127.0.0.1:8080",
		"0.0.0.0:9000":   "http://127.0.0.1:9000",
		"127.0.0.1:8080": "http://127.0.0.1:8080",
		"example:80":     "http://example:80",
	} {
		if got := addrURL(addr); got != want {
			t.Errorf("addrURL(%q) = %q, want %q", addr, got, want)
		}
	}
}

func TestParseArgsTakesFlagsAnywhere(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	j := fs.Bool("json", false, "")
	from := fs.Int64("from", 0, "")
	pos, err := parseArgs(fs, []string{"abc", "--json", "--from", "4", "def"})
	if err != nil || !*j || *from != 4 || !reflect.DeepEqual(pos, []string{"abc", "def"}) {
		t.Fatalf("pos %v json %v from %d err %v", pos, *j, *from, err)
	}
}

// The server's problem+json is the error's text as code: detail; other answers say the status.
func TestAPIError(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer k" {
			t.Errorf("Authorization %q", r.Header.Get("Authorization"))
		}
		if r.URL.Path == "/problem" {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(404)
			_, _ = io.WriteString(w, `{"type":"urn:dshd:problem:not_found","title":"Not Found","status":404,"code":"not_found","detail":"no such session"}`)
			return
		}
		w.WriteHeader(502)
		_, _ = io.WriteString(w, "bad gateway\n")
	}))
	defer srv.Close()
	c := NewClient(srv.URL+"/", "k")
	if err := c.Do(t.Context(), "GET", "/problem", nil, nil); err == nil || err.Error() != "not_found: no such session" {
		t.Fatalf("problem: %v", err)
	}
	if err := c.Do(t.Context(), "GET", "/other", nil, nil); err == nil || err.Error() != "http 502: bad gateway" {
		t.Fatalf("other: %v", err)
	}
}

func TestLineAndStreamPrinter(t *testing.T) {
	t.Parallel()
	evs := []string{
		`{"type":"tool/call","seq":16,"time":0,"data":{"turn":1,"step":1,"callId":"call_1_1","name":"echo","arguments":"{\"text\":\"hi\"}"}}`,
		`{"type":"tool/result","seq":18,"time":0,"data":{"turn":1,"step":1,"message":{"id":"m","role":"user","content":[{"type":"tool-result","toolCallId":"call_1_1","content":[{"type":"text","text":"hi"}],"isError":false}],"source":{"kind":"tool","callId":"call_1_1"}}}}`,
		`{"type":"assistant/chunk","seq":22,"time":0,"data":{"turn":1,"step":2,"chunk":{"type":"reasoning-delta","index":0,"text":"hmm"}}}`,
		`{"type":"assistant/chunk","seq":23,"time":0,"data":{"turn":1,"step":2,"chunk":{"type":"text-delta","index":1,"text":"Hello"}}}`,
		`{"type":"assistant/chunk","seq":24,"time":0,"data":{"turn":1,"step":2,"chunk":{"type":"text-delta","index":1,"text":" world"}}}`,
		`{"type":"assistant/message","seq":25,"time":0,"data":{"turn":1,"step":2,"message":{"role":"assistant","content":[{"type":"text","text":"Hello world"}]}}}`,
		`{"type":"turn/end","seq":29,"time":0,"data":{"turn":1,"reason":{"kind":"error","error":{"code":"SERVER","message":"boom"}}}}`,
	}
	var b strings.Builder
	p := newStreamPrinter(&b)
	var lines []string
	for _, s := range evs {
		var ev Event
		if err := json.Unmarshal([]byte(s), &ev); err != nil {
			t.Fatal(err)
		}
		p.Show(ev)
		lines = append(lines, summary(ev))
	}
	want := "-> echo {\"text\":\"hi\"}\n<- echo: hi\n(thinking) hmm\nHello world\n[turn failed: SERVER: boom]\n"
	if b.String() != want {
		t.Fatalf("stream printer wrote\n%q, want\n%q", b.String(), want)
	}
	wantLines := []string{`call_1_1 echo {"text":"hi"}`, "call_1_1 ok: hi", `reasoning-delta "hmm"`, `text-delta "Hello"`,
		`text-delta " world"`, "Hello world", "turn 1 error SERVER: boom"}
	if !reflect.DeepEqual(lines, wantLines) {
		t.Fatalf("summaries %q, want %q", lines, wantLines)
	}
}

// A stream that sends nothing for the idle timeout is closed, so its reader ends and resumes.
func TestIdleBodyClosesASilentStream(t *testing.T) {
	t.Parallel()
	r, w := io.Pipe()
	defer w.Close()
	// A byte already there, then silence: whenever the timer fires, the first read has its byte.
	body := struct {
		io.Reader
		io.Closer
	}{io.MultiReader(strings.NewReader("x"), r), r}
	b := newIdleBody(body, 20*time.Millisecond)
	defer b.Close()
	buf := make([]byte, 8)
	if n, err := b.Read(buf); n != 1 || err != nil {
		t.Fatalf("read %d %v", n, err)
	}
	if _, err := b.Read(buf); err == nil {
		t.Fatal("a silent stream's read did not end")
	}
}
