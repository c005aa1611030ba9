package main

import (
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/dshd/dshd/internal/mockllm"
	"github.com/dshd/dshd/pkg/secretbox"
)

// docsPrelude is what every page of docs/ may assume of its reader's shell: `make run`'s
// environment (.data/dev.env), KEY (an API key), DSHD and URL (the server), TENANT and PRESET
// (the dev tenant and its preset), and SID, a session of that preset with one finished turn.
// curl fails on an error status of the server, so an example that answers 4xx or 5xx fails the
// test; the mock model's answers (some are errors on purpose) pass as they are.
const docsPrelude = `set -o pipefail
. ./.data/dev.env
KEY=$DSHD_API_KEY DSHD=__URL__ URL=__URL__ TENANT=$DSHD_TENANT_ID PRESET=$DSHD_PRESET_ID
curl() {
  case "$*" in
  *__HOST__*) command curl --fail-with-body "$@" ;;
  *) command curl "$@" ;;
  esac
}
SID=$(curl -s -X POST "$DSHD/v1/sessions" -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
  -d "{\"presetId\":\"$PRESET\"}" | sed -n 's/^{"id":"\([^"]*\)".*/\1/p')
curl -sN -X POST "$DSHD/v1/sessions/$SID/messages/stream" -H "Authorization: Bearer $KEY" \
  -H 'Content-Type: application/json' -d '{"content":"tools:1"}' >/dev/null
`

// docsOutputs are what each page's examples must print, as their comments say: the test fails
// on a page of docs/ with examples that this does not list.
var docsOutputs = map[string][]string{
	"credentials-and-keys.md": {`"name":"prod","provider":"deepseek"`, `"name":"dashboards"`, `"secret":"dshd_`, `"items":[`},
	"import-export.md":        {`"importedEvents":`, `"repairedEvents":0`},
	"scripted-model.md": {"Done after 0 steps and 0 tool results.", "event: llm/retry", `"code":"UNKNOWN_TOOL"`,
		`"kind":"max-tokens"`, `"cancelled":true`, `{"callId":"call_1_1","seq":`, `data: [DONE]`, "HTTP/1.1 429",
		"Done after 1 steps and 1 tool results."},
	"usage-and-quotas.md": {`"requestsPerSecond":20`, `"effective":`},
	"webhooks.md":         {`"url":"https://hooks.example.com/dshd"`, `"secret":"whsec_`},
}

// fence is the first line of a shell block, indented as in a list item or not.
var fence = regexp.MustCompile("^( *)```sh$")

// shellBlocks returns the sh blocks of a Markdown page, unindented, in order.
func shellBlocks(page string) []string {
	var blocks []string
	lines := strings.Split(page, "\n")
	for i := 0; i < len(lines); i++ {
		m := fence.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		indent := m[1]
		var b strings.Builder
		for i++; i < len(lines) && strings.TrimPrefix(lines[i], indent) != "```"; i++ {
			b.WriteString(strings.TrimPrefix(lines[i], indent) + "\n")
		}
		blocks = append(blocks, b.String())
	}
	return blocks
}

// TestDocsExamples runs the sh blocks of every page of docs/, page by page in one shell each,
// against the program with the environment `make run` prepares, as TestREADMEExamples runs the
// README's. A line marked "# in another terminal" (starting the mock model, restarting the
// server) is left to the test, which runs cmd/mockllm's handler where the pages say
// (127.0.0.1:8089) and allows its host; credentials are enabled.
func TestDocsExamples(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: runs the docs' examples with bash and curl")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed")
	}
	mock := mockllm.New(mockllm.Config{})
	ms := httptest.NewServer(mock.Handler())
	t.Cleanup(func() { mock.Close(); ms.Close() })
	mu, _ := url.Parse(ms.URL)
	keys, err := secretbox.ParseKeyring("docs:" + strings.Repeat("A", 43) + "=")
	if err != nil {
		t.Fatal(err)
	}
	m := newTestMain(t, func(c *Config) {
		c.ModelHosts = append(c.ModelHosts, mu.Host)
		c.CredentialKeys = keys
	})
	su, _ := url.Parse(m.URL())
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, path := range pages {
		page, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		blocks := shellBlocks(string(page))
		if len(blocks) == 0 {
			continue
		}
		ran++
		name := filepath.Base(path)
		if docsOutputs[name] == nil {
			t.Errorf("docs/%s has examples but docsOutputs names nothing they print", name)
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			devdb(t, filepath.Join(dir, ".data"), m.Config.DatabaseURL)
			var script strings.Builder
			script.WriteString(strings.NewReplacer("__URL__", m.URL(), "__HOST__", su.Host).Replace(docsPrelude))
			for _, b := range blocks {
				for _, line := range strings.SplitAfter(b, "\n") {
					if !strings.Contains(line, "# in another terminal") {
						script.WriteString(line)
					}
				}
			}
			s := strings.NewReplacer("http://localhost:8080", m.URL(), "localhost:8080", su.Host,
				"http://127.0.0.1:8089", ms.URL, "127.0.0.1:8089", mu.Host).Replace(script.String())
			cmd := exec.Command("bash", "-eu", "-c", s)
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("the examples of docs/%s failed: %v\n%s", name, err, out)
			}
			for _, want := range docsOutputs[name] {
				if !strings.Contains(string(out), want) {
					t.Errorf("the examples of docs/%s printed no %q:\n%s", name, want, out)
				}
			}
		})
	}
	if ran < 5 {
		t.Fatalf("only %d pages of docs/ have sh examples", ran)
	}
}
