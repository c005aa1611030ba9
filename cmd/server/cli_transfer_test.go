package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLIExportImport: `dshd export` writes a session's log in DSH's format (its header, then every
// event); `dshd import` creates a session of a preset from that file, whose own export carries the
// same events before its seed marker; a retry with the same idempotency key creates nothing more;
// a broken log is refused with the line and the rule the server names.
func TestCLIExportImport(t *testing.T) {
	t.Parallel()
	s := newCLIServer(t)
	preset := s.preset(t, `{"name":"p","model":{"provider":"scripted","model":"m"}}`)
	source := s.session(t, preset)
	// A message stream ends with the turn that serves it.
	s.call(t, "POST", "/v1/sessions/"+source+"/messages/stream", s.key, `{"content":"tools:2"}`, 200, nil)

	dir := t.TempDir()
	file := filepath.Join(dir, "log.jsonl")
	if out, err := s.cli(t, "export", source, "-o", file); err != nil || out != "" {
		t.Fatalf("export -o: %q %v", out, err)
	}
	header, events := readDSH(t, mustRead(t, file))
	if header["id"] != source {
		t.Fatalf("the export's header is %v, want the session %s", header, source)
	}
	kinds := map[string]int{}
	for _, ev := range events {
		kinds[ev["type"].(string)]++
	}
	if kinds["tool/call"] != 2 || kinds["tool/result"] != 2 || kinds["turn/end"] != 1 {
		t.Fatalf("the export's events by kind: %v", kinds)
	}
	// To standard output, the same bytes.
	if out, err := s.cli(t, "export", source); err != nil || out != string(mustRead(t, file)) {
		t.Fatalf("export to stdout differs from -o (%v)", err)
	}

	out, err := s.cli(t, "import", "--preset", preset, "-f", file, "--idempotency-key", "cli-import")
	if err != nil || !strings.HasPrefix(out, "imported session ") {
		t.Fatalf("import: %q %v", out, err)
	}
	imported := strings.TrimSpace(strings.Fields(out)[2])
	again, err := s.cli(t, "import", "--preset", preset, "-f", file, "--idempotency-key", "cli-import")
	if err != nil || strings.Fields(again)[2] != imported {
		t.Fatalf("a retried import with its key: %q %v, want session %s again", again, err, imported)
	}
	exported, err := s.cli(t, "export", imported)
	if err != nil {
		t.Fatal(err)
	}
	_, back := readDSH(t, []byte(exported))
	if len(back) != len(events)+1 || back[len(events)]["type"] != "session/end-seed" {
		t.Fatalf("the imported session's export has %d events, want the %d imported and its seed marker", len(back), len(events))
	}
	for i := range events {
		a, _ := json.Marshal(events[i])
		b, _ := json.Marshal(back[i])
		if !bytes.Equal(a, b) {
			t.Fatalf("event %d: imported %s, exported back %s", i, a, b)
		}
	}

	// A log with a gap in its seqs: refused, naming the line and the rule.
	lines := strings.Split(strings.TrimSpace(string(mustRead(t, file))), "\n")
	broken := filepath.Join(dir, "broken.jsonl")
	if err := os.WriteFile(broken, []byte(strings.Join(append(lines[:3:3], lines[4:]...), "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.cli(t, "import", "--preset", preset, "-f", broken); err == nil ||
		!strings.HasPrefix(err.Error(), "invalid_request: line 4 (SES-") {
		t.Fatalf("import of a log with a gap: %v, want invalid_request: line 4 (SES-...)", err)
	}
	if _, err := s.cli(t, "import", "-f", file); err == nil || !strings.Contains(err.Error(), "usage") {
		t.Fatalf("import without a preset: %v", err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// readDSH splits a DSH log into its header line and its events, each a JSON object.
func readDSH(t *testing.T, b []byte) (map[string]any, []map[string]any) {
	t.Helper()
	var header map[string]any
	var events []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var obj map[string]any
		if err := json.Unmarshal(sc.Bytes(), &obj); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if _, isEvent := obj["seq"]; !isEvent && header == nil && events == nil {
			header = obj
			continue
		}
		events = append(events, obj)
	}
	return header, events
}
