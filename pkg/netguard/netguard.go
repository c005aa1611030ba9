// Package netguard keeps outbound HTTP requests that dshd makes on a tenant's behalf (policy
// webhooks, tenant webhooks) off the operator's own network, a guard against server-side request
// forgery: CheckURL refuses URLs that name a loopback, private or link-local host when they are
// registered, and NewTransport refuses, when it dials, every address that is not public, so a
// name that resolves to one (DNS rebinding included) is refused too. It imports only the standard
// library.
package netguard

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// maxEcho bounds how much of a value a message repeats.
const maxEcho = 64

// CheckURL checks an outbound webhook URL: absolute https (http only with allowHTTP), no
// credentials or fragment, and, unless allowPrivate, a host that is neither a loopback name nor
// an address PublicAddr refuses, an IPv4 address written in any form inet_aton reads (127.1,
// 2130706433, 0x7f000001: HostAddr) judged as the address it is. Names are not resolved here: the
// transport checks the address of every connection it dials. Its error messages repeat at most a
// short prefix of the URL's parts.
func CheckURL(raw string, allowHTTP, allowPrivate bool) error {
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Host == "" || u.Opaque != "" {
		return fmt.Errorf("must be an absolute https URL")
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && allowHTTP:
	case u.Scheme == "http":
		return fmt.Errorf("must be an https URL (this server allows no http webhooks)")
	default:
		return fmt.Errorf("must be an https URL (got scheme %q)", Clip(u.Scheme, maxEcho))
	}
	if u.User != nil || u.Fragment != "" || strings.Contains(raw, "#") {
		return fmt.Errorf("must have no credentials and no fragment")
	}
	host := u.Hostname()
	if host == "" {
		return fmt.Errorf("must name a host")
	}
	if allowPrivate {
		return nil
	}
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return fmt.Errorf("host %q is a loopback name (webhooks must be on public addresses)", Clip(host, maxEcho))
	}
	a, isAddr, err := HostAddr(host)
	if err != nil {
		return fmt.Errorf("host %q is %v", Clip(host, maxEcho), err)
	}
	if isAddr && !PublicAddr(a) {
		return fmt.Errorf("host %q is not a public address (webhooks must not point at loopback, private or link-local addresses)", Clip(host, maxEcho))
	}
	return nil
}

// NotPublicError is the dial refusal of an address that is not public.
type NotPublicError struct{ Addr netip.Addr }

func (e NotPublicError) Error() string {
	return fmt.Sprintf("address %s is not public (webhooks must not reach loopback, private or link-local addresses)", e.Addr)
}

// Control is a net.Dialer Control function that refuses to connect to an address that is not
// public (NotPublicError). It runs after name resolution, for every address tried.
func Control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("unexpected dial address %q", Clip(address, maxEcho))
	}
	if !PublicAddr(ap.Addr()) {
		return NotPublicError{ap.Addr().Unmap()}
	}
	return nil
}

// TransportConfig configures NewTransport.
type TransportConfig struct {
	// AllowPrivate allows connections to addresses that are not public (loopback, private,
	// link-local: tests and private deployments). Otherwise every dialled address is checked.
	AllowPrivate bool
	// RootCAs replaces the system roots for https (tests: httptest's certificate).
	RootCAs *x509.CertPool
}

// NewTransport returns an HTTP transport for outbound webhooks: no proxy (a proxy would be
// dialled instead of the checked address), the address of every connection checked (unless
// AllowPrivate), TLS 1.2 or later, bounded handshakes and response headers.
func NewTransport(cfg TransportConfig) *http.Transport {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	if !cfg.AllowPrivate {
		d.Control = Control
	}
	return &http.Transport{
		Proxy:                  nil,
		DialContext:            literalDialer(d.DialContext),
		TLSClientConfig:        &tls.Config{RootCAs: cfg.RootCAs, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           64,
		MaxIdleConnsPerHost:    8,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		MaxResponseHeaderBytes: 16 << 10,
	}
}

// literalDialer dials a host written as an IPv4 number in another form (127.1, 0x7f000001) at the
// address it names, so that it is never sent to a resolver and Control judges that address; a
// numeric host that is no address (HostAddr's error) is refused without a dial.
func literalDialer(dial func(ctx context.Context, network, address string) (net.Conn, error)) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(address)
		if err != nil {
			return dial(ctx, network, address)
		}
		a, isAddr, err := HostAddr(host)
		if err != nil {
			return nil, fmt.Errorf("host %q is %v", Clip(host, maxEcho), err)
		}
		if isAddr {
			address = net.JoinHostPort(a.String(), port)
		}
		return dial(ctx, network, address)
	}
}

// NoRedirects is an http.Client CheckRedirect that follows no redirect: the 3xx answer is the
// response (a redirect could lead anywhere, a private address included).
func NoRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// Clip returns at most max bytes of s, cut at a rune boundary and marked with "…" when cut.
func Clip(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && (s[cut]&0xC0) == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}
