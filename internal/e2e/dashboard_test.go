package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/contracttest"
	"github.com/dshd/dshd/internal/pgtest"
)

// TestDashboardInABrowser runs the dashboard's browser test (web/test/dashboard.mjs): Playwright
// (playwright-core from npm, installed by scripts/ensure-deps.sh) drives Debian's headless
// Chromium against a real server process with the scripted model. Two more origins serve a small
// page that follows a session with a stream token: one listed in DSHD_CORS_ORIGINS, one not.
// Screenshots of every step go to web/test/artifacts/ (gitignored).
//
// Without node, /usr/bin/chromium or web/test/node_modules the test skips, unless CI is set
// (`make test` installs them first).
func TestDashboardInABrowser(t *testing.T) {
	serverBin, _ := buildBinaries(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	node, err := exec.LookPath("node")
	missing := ""
	switch {
	case err != nil:
		missing = "node"
	case !exists("/usr/bin/chromium"):
		missing = "/usr/bin/chromium"
	case !exists(filepath.Join(root, "web/test/node_modules/playwright-core")):
		missing = "web/test/node_modules (npm ci)"
	}
	if missing != "" {
		msg := missing + " is missing: run scripts/ensure-deps.sh"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}

	// The browser reaches the server through a proxy whose connections the script can cut
	// (POST <listed>/cut), to see EventSources reconnect with Last-Event-ID.
	proxy := newCutProxy(t)
	listed := httptest.NewServer(crossOriginPage(proxy))
	defer listed.Close()
	unlisted := httptest.NewServer(crossOriginPage(proxy))
	defer unlisted.Close()

	dbURL := pgtest.URL(t)
	var r *replica
	for attempt := range 3 {
		addr := freeAddr(t)
		p := startProc(t, fmt.Sprintf("dashboard-server%d", attempt), serverBin, []string{
			"DATABASE_URL=" + dbURL,
			"DSHD_ADDR=" + addr,
			"DSHD_ADMIN_TOKEN=" + adminToken,
			"DSHD_DEMO_TOOLS=1",
			"DSHD_LOG_LEVEL=warn",
			"DSHD_SHUTDOWN_TIMEOUT=5s",
			"DSHD_CORS_ORIGINS=" + listed.URL,
			// Short enough that a reconnect in the test may need a fresh token.
			"DSHD_STREAM_TOKEN_TTL=30s",
		}, "serve")
		r = &replica{proc: p, url: "http://" + addr}
		if err = r.waitReady(); err == nil {
			contracttest.Serve(t, r.url)
			break
		}
		p.stop()
	}
	if err != nil {
		t.Fatal(err)
	}
	proxy.target = strings.TrimPrefix(r.url, "http://")
	go proxy.serve()
	var tenant struct{ APIKey string }
	mustJSON(t, r.call(t.Context(), "POST", "/v1/tenants", adminToken, map[string]string{"name": "browser"}), 201, &tenant)

	artifacts := filepath.Join(root, "web/test/artifacts")
	if err := os.RemoveAll(artifacts); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, node, filepath.Join(root, "web/test/dashboard.mjs"), proxy.url(), tenant.APIKey)
	cmd.Dir = filepath.Join(root, "web/test")
	cmd.Env = append(os.Environ(), "DSHD_ARTIFACTS="+artifacts, "DSHD_API_DIRECT="+r.url, "DSHD_CUT="+listed.URL+"/cut",
		"DSHD_CORS_PAGE="+listed.URL, "DSHD_CORS_UNLISTED_PAGE="+unlisted.URL)
	out, err := cmd.CombinedOutput()
	t.Logf("dashboard.mjs (%v):\n%s", time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("the browser test failed: %v (screenshots in %s)", err, artifacts)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// crossOriginPage serves a page that follows the session named in its query with the stream
// token given there, recording the seqs it receives in window.seen.
func crossOriginPage(proxy *cutProxy) http.Handler {
	types := []string{"agent/inbox/spliced", "turn/start", "turn/end", "step/start", "step/end", "user/message",
		"request/header", "request/context", "assistant/chunk", "assistant/message", "tool/call", "tool/result",
		"approval/asked", "approval/decided", "agent/cancel", "llm/retry", "session/end-seed", "todo/write",
		"turn/parked", "turn/resumed", "tool/client-result"}
	page := `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>another origin</title>
<link rel="icon" href="data:,"></head><body><p id="state">starting</p><script>
const q = new URLSearchParams(location.search);
window.seen = [];
window.opens = 0;
const es = new EventSource(q.get('api') + '/v1/sessions/' + q.get('session') + '/events?token=' + encodeURIComponent(q.get('token')));
es.onopen = () => { window.opens++; document.getElementById('state').textContent = 'open'; };
es.onerror = () => { document.getElementById('state').textContent = 'error ' + es.readyState; };
for (const t of ` + "['" + strings.Join(types, "','") + "']" + `) es.addEventListener(t, (m) => window.seen.push(JSON.parse(m.data).seq));
</script></body></html>`
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/cut" && r.Method == http.MethodPost {
			fmt.Fprintf(w, "%d connections cut\n", proxy.cut())
			return
		}
		body := page
		switch r.URL.Path {
		case "/":
		case "/chat":
			body = chatPage
		default:
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(body))
	})
}

// chatPage runs a chat in a session with nothing but an action token (?token=, minted by the
// test with post, approve and cancel): it posts a message over POST .../messages/stream with the
// token as its bearer, answers the approval the turn asks, then posts a message whose tool
// sleeps and cancels that turn once its tool/call shows. window.ends are the turns' end kinds,
// window.listStatus what GET /v1/sessions answered the token, window.failure any error.
const chatPage = `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>a chat on another origin</title>
<link rel="icon" href="data:,"></head><body><p id="state">starting</p><ol id="log"></ol><script>
const q = new URLSearchParams(location.search);
const api = q.get('api'), sid = q.get('session'), auth = { Authorization: 'Bearer ' + q.get('token') };
window.done = false; window.failure = null; window.ends = []; window.listStatus = 0;
function show(text) { const li = document.createElement('li'); li.textContent = text; document.getElementById('log').append(li); }
async function* events(resp) {
  const reader = resp.body.getReader(), dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    buf = (buf + dec.decode(value, { stream: true })).replace(/\r\n?/g, '\n');
    for (let i = buf.indexOf('\n\n'); i >= 0; i = buf.indexOf('\n\n')) {
      const frame = buf.slice(0, i);
      buf = buf.slice(i + 2);
      const data = frame.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).replace(/^ /, '')).join('\n');
      if (data) yield JSON.parse(data);
    }
  }
}
async function call(method, path, body) {
  const resp = await fetch(api + '/v1/sessions/' + sid + path, { method, headers: { ...auth, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body) });
  if (!resp.ok) throw new Error(method + ' ' + path + ': ' + resp.status + ' ' + await resp.text());
  return resp;
}
async function turn(content, onEvent) {
  for await (const ev of events(await call('POST', '/messages/stream', { content }))) {
    show(ev.seq + ' ' + ev.type);
    await onEvent(ev);
    if (ev.type === 'turn/end') return ev.data.reason.kind;
  }
  throw new Error('the message stream ended before its turn/end');
}
(async () => {
  window.ends.push(await turn('tool:echo', async (ev) => {
    if (ev.type === 'approval/asked') await call('POST', '/approvals/' + ev.data.id, { outcome: 'allowed-once' });
  }));
  window.ends.push(await turn('tool:sleep args:{"ms":60000}', async (ev) => {
    if (ev.type === 'tool/call') await call('POST', '/cancel', {});
  }));
  window.listStatus = (await fetch(api + '/v1/sessions', { headers: auth })).status;
  document.getElementById('state').textContent = 'done';
  window.done = true;
})().catch((e) => { window.failure = String(e); document.getElementById('state').textContent = 'failed: ' + e; });
</script></body></html>`

// cutProxy forwards TCP connections to the server and can cut all of them at once, as a network
// failure would (the browser's own offline emulation leaves open connections alone).
type cutProxy struct {
	ln     net.Listener
	target string // host:port, set before serve
	mu     sync.Mutex
	conns  map[net.Conn]bool
}

func newCutProxy(t *testing.T) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, conns: map[net.Conn]bool{}}
	t.Cleanup(func() { ln.Close(); p.cut() })
	return p
}

func (p *cutProxy) url() string { return "http://" + p.ln.Addr().String() }

func (p *cutProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.pipe(c)
	}
}

func (p *cutProxy) pipe(c net.Conn) {
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c], p.conns[u] = true, true
	p.mu.Unlock()
	go func() { _, _ = io.Copy(u, c); u.Close() }()
	_, _ = io.Copy(c, u)
	c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, u)
	p.mu.Unlock()
}

// cut closes every open connection and returns how many client connections it closed.
func (p *cutProxy) cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.conns) / 2
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
	return n
}
