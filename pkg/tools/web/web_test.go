package web_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/tools/tooltest"
	"github.com/dshd/dshd/pkg/tools/web"
)

func fetch(t *testing.T, cfg web.Config, ctx context.Context, url string) (string, string) {
	t.Helper()
	tl, err := web.Tool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	res := tooltest.New(t, tl).Call(ctx, t, "s", "web_fetch", map[string]any{"url": url})
	return tooltest.Text(res), tooltest.Code(res)
}

// serveOn starts an HTTP server on ip (a loopback address) for h.
func serveOn(t *testing.T, ip string, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Skipf("cannot listen on %s: %v", ip, err)
	}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: h}}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestWebFetchRefusesLocalAddresses(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	target := serveOn(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hits.Add(1); fmt.Fprint(w, "internal") }))
	port := strings.TrimPrefix(target, "http://127.0.0.1:")
	for _, u := range []string{target, "http://localhost:" + port + "/", "http://[::1]:" + port + "/",
		"http://0.0.0.0:" + port, "http://169.254.169.254/latest/meta-data/", "http://10.1.2.3/", "http://192.168.0.1/",
		"http://[fd00::1]/", "http://[::ffff:127.0.0.1]:" + port + "/", "http://100.64.0.1/",
		// Non-canonical IPv4 forms of 127.0.0.1 and 169.254.169.254 (issue 17, finding 5).
		"http://127.1:" + port + "/", "http://2130706433:" + port + "/", "http://0x7f000001:" + port + "/",
		"http://0177.0.0.1:" + port + "/", "http://0xa9fea9fe/"} {
		text, code := fetch(t, web.Config{}, context.Background(), u)
		if code != web.CodeBlockedURL {
			t.Errorf("%s: %q %s, want %s", u, text, code, web.CodeBlockedURL)
		}
	}
	if hits.Load() != 0 {
		t.Fatalf("the local server was reached %d times", hits.Load())
	}
}

// TestWebFetchRefusesRedirectsToLocalAddresses: a server the fetcher may reach (127.0.0.2,
// allowed for the test) redirects to 127.0.0.1, and to a non-http scheme; both are refused.
func TestWebFetchRefusesRedirectsToLocalAddresses(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	target := serveOn(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hits.Add(1); fmt.Fprint(w, "internal") }))
	redirector := serveOn(t, "127.0.0.2", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		to := target + "/secret"
		if r.URL.Path == "/file" {
			to = "file:///etc/passwd"
		}
		http.Redirect(w, r, to, http.StatusFound)
	}))
	cfg := web.Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}}
	for _, p := range []string{"/", "/file"} {
		text, code := fetch(t, cfg, context.Background(), redirector+p)
		if code != web.CodeBlockedURL {
			t.Errorf("redirect %s: %q %s, want %s", p, text, code, web.CodeBlockedURL)
		}
	}
	if hits.Load() != 0 {
		t.Fatalf("the redirect target was reached %d times", hits.Load())
	}
}

func TestWebFetchReturnsText(t *testing.T) {
	t.Parallel()
	u := serveOn(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/page":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprint(w, `<html><head><title>T</title><style>p{}</style></head><body><h1>Title</h1><p>One &amp; two</p><script>x()</script><p>Three</p></body></html>`)
		case "/json":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"a":1}`)
		case "/bin":
			w.Header().Set("Content-Type", "application/octet-stream")
			_, _ = w.Write([]byte{0, 1, 2, 0xff})
		default:
			http.NotFound(w, r)
		}
	}))
	cfg := web.Config{AllowPrivate: true}
	text, code := fetch(t, cfg, context.Background(), u+"/page")
	if code != "" || text != "URL: "+u+"/page\nStatus: 200\nContent-Type: text/html; charset=utf-8\n\nTitle\nOne & two\nThree" {
		t.Fatalf("html: %q %s", text, code)
	}
	if text, _ := fetch(t, cfg, context.Background(), u+"/json"); !strings.HasSuffix(text, "\n\n{\"a\":1}") {
		t.Errorf("json: %q", text)
	}
	if _, code := fetch(t, cfg, context.Background(), u+"/bin"); code != web.CodeProviderError {
		t.Errorf("binary: %s", code)
	}
	if text, code := fetch(t, cfg, context.Background(), u+"/missing"); code != web.CodeProviderError || !strings.Contains(text, "404") {
		t.Errorf("404: %q %s", text, code)
	}
}

func TestWebFetchLimits(t *testing.T) {
	t.Parallel()
	u := serveOn(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			fmt.Fprint(w, strings.Repeat("x", 1000))
		case "/slow":
			select {
			case <-r.Context().Done():
			case <-time.After(30 * time.Second):
			}
		}
	}))
	if _, code := fetch(t, web.Config{AllowPrivate: true, MaxBytes: 100}, context.Background(), u+"/big"); code != web.CodeFetchTooLarge {
		t.Errorf("big: %s", code)
	}
	if text, code := fetch(t, web.Config{AllowPrivate: true, MaxTextBytes: 10}, context.Background(), u+"/big"); code != "" ||
		!strings.HasSuffix(text, "\n\nxxxxxxxxxx\n[truncated: the text is longer than shown]") {
		t.Errorf("text cap: %q %s", text, code)
	}
	start := time.Now()
	if _, code := fetch(t, web.Config{AllowPrivate: true, Timeout: 200 * time.Millisecond}, context.Background(), u+"/slow"); code != web.CodeFetchTimeout || time.Since(start) > 10*time.Second {
		t.Errorf("slow: %s after %v", code, time.Since(start))
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(200 * time.Millisecond); cancel() }()
	if _, code := fetch(t, web.Config{AllowPrivate: true}, ctx, u+"/slow"); code != web.CodeAborted {
		t.Errorf("cancelled: %s", code)
	}
}

func TestWebFetchInvalidURLs(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"ftp://example.com/", "not a url", "http://", "file:///etc/passwd", "//example.com", "http://user:pw@example.com/"} {
		if text, code := fetch(t, web.Config{}, context.Background(), u); code != web.CodeInvalidURL {
			t.Errorf("%q: %q %s", u, text, code)
		}
	}
}
