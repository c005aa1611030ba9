// Package web is the `web_fetch` tool: an HTTP(S) GET of one URL, decoded to text. Only http and
// https; connections to loopback, private, link-local, multicast and other non-public addresses
// are refused (WEB_BLOCKED_URL, the webhooks' rule: netguard.PublicAddr), checked on the address
// actually dialled (the dialer's Control),
// so a redirect or a DNS answer towards one is refused too; environment proxies are never used.
// The body is bounded in size (WEB_FETCH_TOO_LARGE) and the whole fetch in time
// (WEB_FETCH_TIMEOUT).
package web

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/netguard"
	"github.com/dshd/dshd/pkg/registry"
)

// Config configures `web_fetch`.
type Config struct {
	// AllowPrivate lets fetches reach loopback, private and link-local addresses
	// (DSHD_WEB_ALLOW_PRIVATE). Default false: they are refused.
	AllowPrivate bool
	// Allow are addresses that may be fetched although they are not public (an internal mirror,
	// tests). Default none.
	Allow []netip.Prefix
	// Timeout bounds a whole fetch, redirects and body included. Default DefaultTimeout.
	Timeout time.Duration
	// MaxBytes bounds the response body. Default DefaultMaxBytes.
	MaxBytes int64
	// MaxTextBytes bounds the text given to the model; the rest is cut with a note. Default
	// DefaultMaxTextBytes.
	MaxTextBytes int
	// MaxRedirects bounds the redirects followed. Default 5.
	MaxRedirects int
}

// Defaults of Config.
const (
	DefaultTimeout      = 30 * time.Second
	DefaultMaxBytes     = 5 << 20
	DefaultMaxTextBytes = 100 << 10
)

// Error codes (docs/rules.md, tool-web) and their name.
const (
	CodeInvalidURL    = "WEB_INVALID_URL"
	CodeBlockedURL    = "WEB_BLOCKED_URL"
	CodeFetchTimeout  = "WEB_FETCH_TIMEOUT"
	CodeFetchTooLarge = "WEB_FETCH_TOO_LARGE"
	CodeProviderError = "WEB_PROVIDER_ERROR"
	CodeAborted       = "WEB_ABORTED"
	ErrorName         = "WebError"
)

// Args are the arguments of `web_fetch`.
type Args struct {
	URL string `json:"url" jsonschema:"required,description=The http or https URL to fetch."`
}

// Out is the value of `web_fetch`.
type Out struct {
	URL         string `json:"url"` // after redirects
	Status      int    `json:"status"`
	ContentType string `json:"contentType"`
	Text        string `json:"text"`
	Truncated   bool   `json:"truncated"`
}

// Tool returns a fresh definition of `web_fetch`.
func Tool(cfg Config) (*registry.Tool, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.MaxTextBytes <= 0 {
		cfg.MaxTextBytes = DefaultMaxTextBytes
	}
	if cfg.MaxRedirects <= 0 {
		cfg.MaxRedirects = 5
	}
	f := &fetcher{cfg: cfg}
	f.client = f.newClient()
	return registry.Define(registry.DefineSpec[Args, Out]{
		Name: "web_fetch",
		Description: fmt.Sprintf("Fetch an http or https URL and return its content as text (HTML is reduced to its "+
			"text). Private and local network addresses are refused. At most %d KiB of text is returned.", cfg.MaxTextBytes>>10),
		ConcurrencySafe: true,
		Render:          func(_ Args, o Out) ([]llm.Block, error) { return []llm.Block{llm.TextBlock(render(o))}, nil },
		PresentCall:     func(a Args) string { return "fetch " + a.URL },
	}, f.fetch)
}

type fetcher struct {
	cfg    Config
	client *http.Client
}

func webError(code, format string, args ...any) error {
	return registry.NewError(ErrorName, code, format, args...)
}

// blockedError is a refused address; the dialer's Control returns it.
type blockedError struct{ addr netip.Addr }

func (e *blockedError) Error() string { return "address " + e.addr.String() + " is not public" }

func (f *fetcher) newClient() *http.Client {
	d := &net.Dialer{Timeout: 10 * time.Second, Control: f.control}
	tr := &http.Transport{
		Proxy:                 nil, // never an environment proxy: it would dial for us, unchecked
		DialContext:           d.DialContext,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: f.cfg.Timeout,
		MaxIdleConns:          16,
		IdleConnTimeout:       30 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	return &http.Client{Transport: tr, CheckRedirect: f.checkRedirect}
}

// control refuses a connection to a non-public address: it runs on the resolved address, for
// every connection, redirects included.
func (f *fetcher) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return err
	}
	if !f.allowed(ap.Addr()) {
		return &blockedError{ap.Addr()}
	}
	return nil
}

// allowed reports whether a may be dialled.
func (f *fetcher) allowed(a netip.Addr) bool {
	a = a.Unmap()
	if f.cfg.AllowPrivate || netguard.PublicAddr(a) {
		return true
	}
	for _, p := range f.cfg.Allow {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func (f *fetcher) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) > f.cfg.MaxRedirects {
		return webError(CodeProviderError, "more than %d redirects", f.cfg.MaxRedirects)
	}
	if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
		return webError(CodeBlockedURL, "a redirect to a %s URL is refused: only http and https", req.URL.Scheme)
	}
	return nil
}

// parse checks the URL: http or https, a host, and no literal non-public address.
func (f *fetcher) parse(raw string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || u.Host == "" || u.Hostname() == "" {
		return nil, webError(CodeInvalidURL, "%q is not an absolute http or https URL", raw)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, webError(CodeInvalidURL, "only http and https URLs can be fetched, not %s", u.Scheme)
	}
	if u.User != nil {
		return nil, webError(CodeInvalidURL, "URLs with credentials are not fetched")
	}
	// An IPv4 address in another form (127.1, 0x7f000001) is judged, and fetched, as the address
	// it is (netguard.HostAddr); a numeric host that is no address is refused.
	a, isAddr, err := netguard.HostAddr(u.Hostname())
	if err != nil {
		return nil, webError(CodeInvalidURL, "%q is not an absolute http or https URL: its host is %v", raw, err)
	}
	if isAddr && !f.allowed(a) {
		return nil, webError(CodeBlockedURL, "%s is not a public address", a)
	}
	if isAddr && a.Is4() && u.Hostname() != a.String() {
		if port := u.Port(); port != "" {
			u.Host = net.JoinHostPort(a.String(), port)
		} else {
			u.Host = a.String()
		}
	}
	return u, nil
}

func (f *fetcher) fetch(ctx context.Context, _ *registry.Execution, a Args) (Out, error) {
	u, err := f.parse(a.URL)
	if err != nil {
		return Out{}, err
	}
	fctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(fctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return Out{}, webError(CodeInvalidURL, "%q cannot be requested", a.URL)
	}
	req.Header.Set("User-Agent", "dshd-web-fetch/1")
	req.Header.Set("Accept", "text/html,text/plain,application/json,application/xml;q=0.9,*/*;q=0.5")
	resp, err := f.client.Do(req)
	if err != nil {
		return Out{}, f.failure(ctx, fctx, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, f.cfg.MaxBytes+1))
	if err != nil {
		return Out{}, f.failure(ctx, fctx, err)
	}
	if int64(len(body)) > f.cfg.MaxBytes {
		return Out{}, webError(CodeFetchTooLarge, "the response is larger than %d bytes", f.cfg.MaxBytes)
	}
	if resp.StatusCode >= 400 {
		return Out{}, webError(CodeProviderError, "HTTP %s from %s", resp.Status, resp.Request.URL)
	}
	ct := resp.Header.Get("Content-Type")
	text, err := decode(ct, body)
	if err != nil {
		return Out{}, err
	}
	out := Out{URL: resp.Request.URL.String(), Status: resp.StatusCode, ContentType: ct, Text: text}
	if len(out.Text) > f.cfg.MaxTextBytes {
		cut := f.cfg.MaxTextBytes
		for cut > 0 && !utf8.RuneStart(out.Text[cut]) {
			cut--
		}
		out.Text, out.Truncated = out.Text[:cut], true
	}
	return out, nil
}

// failure maps a failed request: the caller's cancel, the fetch's own deadline, a refused
// address, a refused redirect, or anything else (DNS, connection, TLS) as a provider error.
func (f *fetcher) failure(ctx, fctx context.Context, err error) error {
	var blocked *blockedError
	var coded registry.Coded
	switch {
	case ctx.Err() != nil:
		return webError(CodeAborted, "the fetch was aborted")
	case errors.As(err, &blocked):
		return webError(CodeBlockedURL, "the URL leads to %s, which is not a public address", blocked.addr)
	case errors.As(err, &coded):
		return coded
	case fctx.Err() != nil || isTimeout(err):
		return webError(CodeFetchTimeout, "the fetch took longer than %dms", f.cfg.Timeout.Milliseconds())
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return webError(CodeProviderError, "the fetch failed: %v", err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// decode turns a body into text by its media type: HTML is reduced to its text; other text,
// JSON, XML and JavaScript are kept; anything else that is not valid UTF-8 is refused.
func decode(contentType string, body []byte) (string, error) {
	mt, _, _ := mime.ParseMediaType(contentType)
	switch {
	case mt == "text/html" || mt == "application/xhtml+xml":
		return htmlText(string(body)), nil
	case strings.HasPrefix(mt, "text/"), mt == "application/json", strings.HasSuffix(mt, "+json"),
		mt == "application/xml", strings.HasSuffix(mt, "+xml"), mt == "application/javascript":
		return strings.ToValidUTF8(string(body), "\uFFFD"), nil
	case utf8.Valid(body) && !strings.ContainsRune(string(body), 0):
		return string(body), nil
	}
	return "", webError(CodeProviderError, "the response is binary (%s), not text", contentType)
}

func render(o Out) string {
	s := fmt.Sprintf("URL: %s\nStatus: %d\nContent-Type: %s\n\n%s", o.URL, o.Status, o.ContentType, o.Text)
	if o.Truncated {
		s += "\n[truncated: the text is longer than shown]"
	}
	return s
}
