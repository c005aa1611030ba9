package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestCLIHelperProcess is not a test: the chat tests run this test binary as dshd with
// -test.run=^TestCLIHelperProcess$ and DSHD_TEST_RUN_MAIN=1, the program's arguments after "--".
func TestCLIHelperProcess(t *testing.T) {
	if os.Getenv("DSHD_TEST_RUN_MAIN") != "1" {
		return
	}
	for i, a := range os.Args {
		if a == "--" {
			os.Args = append([]string{os.Args[0]}, os.Args[i+1:]...)
			break
		}
	}
	main() // exits 1 on an error
	os.Exit(0)
}

// dshdCommand is the command that runs this test binary as dshd with args.
func dshdCommand(env func(string) string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^TestCLIHelperProcess$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), "DSHD_TEST_RUN_MAIN=1", "DSHD_URL="+env("DSHD_URL"), "DSHD_API_KEY="+env("DSHD_API_KEY"))
	return cmd
}

// cliServer is a real server over a fresh database, with a tenant whose key the client uses.
type cliServer struct {
	m   *Main
	key string
}

func newCLIServer(t *testing.T) *cliServer {
	t.Helper()
	m := newTestMain(t)
	s := &cliServer{m: m}
	var tenant struct{ APIKey string }
	s.call(t, "POST", "/v1/tenants", "admin", `{"name":"cli"}`, 201, &tenant)
	s.key = tenant.APIKey
	return s
}

func (s *cliServer) call(t *testing.T, method, path, key, body string, want int, out any) {
	t.Helper()
	req, _ := http.NewRequest(method, s.m.URL()+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, b, want)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatal(err)
		}
	}
}

// preset creates a preset of the in-process scripted model and returns its id.
func (s *cliServer) preset(t *testing.T, body string) string {
	t.Helper()
	var p struct{ ID string }
	s.call(t, "POST", "/v1/presets", s.key, body, 201, &p)
	return p.ID
}

func (s *cliServer) session(t *testing.T, preset string) string {
	t.Helper()
	var sess struct{ ID string }
	s.call(t, "POST", "/v1/sessions", s.key, `{"presetId":"`+preset+`"}`, 201, &sess)
	return sess.ID
}

// env is the client's environment, as ./.data/dev.env and the Makefile give it, pointed at url.
func (s *cliServer) env(url string) func(string) string {
	return func(name string) string {
		switch name {
		case "DSHD_URL":
			return url
		case "DSHD_API_KEY":
			return s.key
		}
		return ""
	}
}

// cli runs a client command in process and returns what it printed.
func (s *cliServer) cli(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(t.Context(), args, s.env(s.m.URL()), &out, &errOut)
	if strings.Contains(out.String()+errOut.String(), s.key) {
		t.Fatalf("dshd %v printed the API key", args)
	}
	return out.String(), err
}

func TestCLIVersion(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := run(t.Context(), []string{"version"}, func(string) string { return "" }, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.HasPrefix(got, "dshd ") || !strings.Contains(got, runtime.Version()) {
		t.Fatalf("version printed %q, want dshd <version> ... %s", got, runtime.Version())
	}
}

func TestCLISessionsAndPresets(t *testing.T) {
	t.Parallel()
	s := newCLIServer(t)
	file := filepath.Join(t.TempDir(), "preset.json")
	if err := os.WriteFile(file, []byte(`{"name":"from-file","model":{"provider":"scripted","model":"m"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := s.cli(t, "presets", "create", "-f", file)
	if err != nil || !strings.HasPrefix(out, "created preset ") {
		t.Fatalf("presets create: %q %v", out, err)
	}
	preset := strings.Fields(out)[2]
	if out, err = s.cli(t, "presets"); err != nil || !strings.Contains(out, preset) || !strings.Contains(out, "from-file") || !strings.Contains(out, "scripted/m") {
		t.Fatalf("presets list: %q %v", out, err)
	}
	out, err = s.cli(t, "presets", "show", preset)
	var p struct{ ID, Name string }
	if err != nil || json.Unmarshal([]byte(out), &p) != nil || p.ID != preset || p.Name != "from-file" {
		t.Fatalf("presets show: %q %v", out, err)
	}
	// An invalid preset is refused with the server's problem, printed as code: detail.
	bad := filepath.Join(t.TempDir(), "bad.json")
	_ = os.WriteFile(bad, []byte(`{"name":"x","model":{"provider":"nope","model":"m"}}`), 0o600)
	if _, err = s.cli(t, "presets", "create", "-f", bad); err == nil || !strings.HasPrefix(err.Error(), "invalid_request: ") {
		t.Fatalf("presets create of an invalid preset: %v, want invalid_request: <detail>", err)
	}

	session := s.session(t, preset)
	if out, err = s.cli(t, "sessions", "list"); err != nil || !strings.Contains(out, session) || !strings.Contains(out, preset+" v1") {
		t.Fatalf("sessions list: %q %v", out, err)
	}
	out, err = s.cli(t, "sessions", "--json")
	var item struct{ ID string }
	if err != nil || json.Unmarshal([]byte(strings.TrimSpace(out)), &item) != nil || item.ID != session {
		t.Fatalf("sessions --json: %q %v", out, err)
	}
	out, err = s.cli(t, "sessions", "show", session)
	var got struct {
		ID      string
		LastSeq int64
	}
	if err != nil || json.Unmarshal([]byte(out), &got) != nil || got.ID != session || got.LastSeq != -1 {
		t.Fatalf("sessions show: %q %v", out, err)
	}
	if _, err = s.cli(t, "sessions", "show", "8f6f1c1e-0000-4000-8000-000000000000"); err == nil || !strings.HasPrefix(err.Error(), "not_found: ") {
		t.Fatalf("sessions show of an unknown session: %v, want not_found: <detail>", err)
	}
	if _, err = s.cli(t, "tail", "8f6f1c1e-0000-4000-8000-000000000000"); err == nil || !strings.HasPrefix(err.Error(), "not_found: ") {
		t.Fatalf("tail of an unknown session: %v, want not_found: <detail>", err)
	}
	// A wrong key: the server's problem, and the key is not printed.
	var errOut bytes.Buffer
	err = run(t.Context(), []string{"sessions", "--key", "dshd_wrong-key-value"}, s.env(s.m.URL()), io.Discard, &errOut)
	if err == nil || !strings.HasPrefix(err.Error(), "unauthorized: ") || strings.Contains(err.Error()+errOut.String(), "wrong-key-value") {
		t.Fatalf("sessions with a wrong key: %v", err)
	}
	if err = run(t.Context(), []string{"sessions"}, func(string) string { return "" }, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "DSHD_API_KEY") {
		t.Fatalf("sessions without a key: %v", err)
	}
}
