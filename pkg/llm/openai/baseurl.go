package openai

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// Errors of AllowedBaseURL: every error it returns wraps one of them.
var (
	// ErrBaseURLInvalid: not an absolute http or https URL without userinfo, query or fragment.
	ErrBaseURLInvalid = errors.New("model baseUrl must be an absolute http or https URL without credentials, query or fragment")
	// ErrHostNotAllowed: the URL's host and port are not in the allowed list.
	ErrHostNotAllowed = errors.New("model baseUrl host is not allowed (the server's DSHD_MODEL_HOSTS lists the allowed hosts)")
)

// AllowedBaseURL checks a model baseUrl against the allowed hosts (DSHD_MODEL_HOSTS), the one
// rule used both when a preset is written and when its model client is built, and returns the
// URL normalized: the request must go to the normalized URL, the one that was checked.
//
// The URL must be absolute, with scheme http or https, a host, no userinfo
// (https://api.deepseek.com@evil is rejected, not read as host evil), no query and no fragment.
// Hosts are compared case-insensitively with a trailing dot removed, IP literals in canonical
// form (IPv6 in brackets, [::1]), and ports made explicit (https 443, http 80).
//
// An entry of hosts is "*" (any host), a host ("api.deepseek.com", "127.0.0.1", "::1" or
// "[::1]"), or a host and port ("127.0.0.1:8080", "[::1]:8080"). An entry without a port allows
// the default port of the URL's scheme only: "localhost" allows http://localhost and
// https://localhost but not http://localhost:8080. "*" still requires a well-formed URL.
//
// The normalized URL has the lowercased host without a trailing dot, no port when it is the
// scheme's default, and the path as given.
func AllowedBaseURL(raw string, hosts []string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBaseURLInvalid, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("%w: scheme %q", ErrBaseURLInvalid, u.Scheme)
	case u.Opaque != "" || u.Host == "":
		return nil, fmt.Errorf("%w: no host", ErrBaseURLInvalid)
	case u.User != nil:
		return nil, fmt.Errorf("%w: userinfo", ErrBaseURLInvalid)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.RawFragment != "" || strings.ContainsAny(raw, "?#"):
		return nil, fmt.Errorf("%w: query or fragment", ErrBaseURLInvalid)
	}
	host, ok := canonicalHost(u.Hostname())
	if !ok {
		return nil, fmt.Errorf("%w: host %q", ErrBaseURLInvalid, u.Host)
	}
	port := u.Port()
	if port == "" { // none, or an empty one ("host:"), which means the default too
		port = defaultPort(u.Scheme)
	} else if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return nil, fmt.Errorf("%w: port %q", ErrBaseURLInvalid, port)
	} else {
		port = strconv.Itoa(p) // 0443 is 443
	}
	if !hostAllowed(host, port, u.Scheme, hosts) {
		return nil, fmt.Errorf("%w: %s", ErrHostNotAllowed, net.JoinHostPort(host, port))
	}
	n := *u
	n.Host = joinHost(host, port, u.Scheme)
	return &n, nil
}

// IsDeepSeekEndpoint reports whether u, a URL normalized by AllowedBaseURL, is DeepSeek's own
// API: https with host api.deepseek.com on the default port. Only that endpoint may receive the
// operator's DeepSeek key.
func IsDeepSeekEndpoint(u *url.URL) bool {
	return u != nil && u.Scheme == "https" && u.Host == "api.deepseek.com" && u.User == nil
}

func defaultPort(scheme string) string {
	if scheme == "https" {
		return "443"
	}
	return "80"
}

// canonicalHost lowercases a host name and drops one trailing dot; an IP literal is put in its
// canonical form. ok is false for an empty or malformed host.
func canonicalHost(h string) (string, bool) {
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	if h == "" || strings.ContainsAny(h, "/\\@ \t\r\n") {
		return "", false
	}
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Zone() != "" {
			return "", false // no link-local zones
		}
		return a.String(), true
	}
	if strings.Contains(h, ":") { // an IPv6 literal that did not parse
		return "", false
	}
	return h, true
}

func joinHost(host, port, scheme string) string {
	if port == defaultPort(scheme) {
		if strings.Contains(host, ":") {
			return "[" + host + "]"
		}
		return host
	}
	return net.JoinHostPort(host, port)
}

// hostAllowed reports whether host:port of a URL with scheme matches an entry of hosts.
func hostAllowed(host, port, scheme string, hosts []string) bool {
	for _, e := range hosts {
		e = strings.TrimSpace(e)
		if e == "*" {
			return true
		}
		eh, ep, ok := splitEntry(e)
		if !ok || eh != host {
			continue
		}
		if ep == "" {
			ep = defaultPort(scheme)
		}
		if ep == port {
			return true
		}
	}
	return false
}

// splitEntry reads an allowed-hosts entry: host, host:port, bare IPv6 or [IPv6](:port).
func splitEntry(e string) (host, port string, ok bool) {
	switch {
	case strings.HasPrefix(e, "["):
		if strings.HasSuffix(e, "]") {
			host = e[1 : len(e)-1]
		} else {
			h, p, err := net.SplitHostPort(e)
			if err != nil {
				return "", "", false
			}
			host, port = h, p
		}
	case strings.Count(e, ":") == 1:
		h, p, err := net.SplitHostPort(e)
		if err != nil {
			return "", "", false
		}
		host, port = h, p
	default:
		host = e // a name, an IPv4 address or a bare IPv6 address
	}
	host, ok = canonicalHost(host)
	if !ok {
		return "", "", false
	}
	if port != "" {
		p, err := strconv.Atoi(port)
		if err != nil || p < 1 || p > 65535 {
			return "", "", false
		}
		port = strconv.Itoa(p)
	}
	return host, port, true
}
