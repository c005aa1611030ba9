package netguard

import (
	"errors"
	"net/netip"
	"strconv"
	"strings"
)

// errNotAddress reports a host that is written as a number but is no valid IPv4 address.
var errNotAddress = errors.New("a numeric host that is not a valid IPv4 address")

// HostAddr returns the address a URL's host (url.URL.Hostname: no brackets, no port) names
// literally, as the resolvers and HTTP clients that follow inet_aton read it: an IPv6 literal, or
// an IPv4 address of 1 to 4 dot-separated parts, each decimal, octal (a leading 0) or hexadecimal
// (0x), the last part filling the bytes the others leave (127.1, 2130706433, 0x7f000001 and
// 0177.0.0.1 are all 127.0.0.1), with at most one trailing dot. ok is false for a name. A host whose
// last label is a number but that is no such address (256.1.1.1, 1.2.3.4.5) is an error: it names
// no host, and a resolver might still read it as one.
func HostAddr(host string) (a netip.Addr, ok bool, err error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return a, true, nil
	}
	h := strings.TrimSuffix(host, ".")
	parts := strings.Split(h, ".")
	if h == "" || !numericPart(parts[len(parts)-1]) {
		return netip.Addr{}, false, nil
	}
	if len(parts) > 4 {
		return netip.Addr{}, false, errNotAddress
	}
	var v uint64
	for i, p := range parts {
		n, perr := parsePart(p)
		last := i == len(parts)-1
		limit := uint64(255)
		if last {
			limit = 1<<(8*(5-len(parts))) - 1
		}
		if perr != nil || n > limit {
			return netip.Addr{}, false, errNotAddress
		}
		if last {
			v = v<<(8*(5-len(parts))) | n
		} else {
			v = v<<8 | n
		}
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true, nil
}

// numericPart reports whether a label is written as a number (decimal digits, or 0x and hex
// digits), which makes the host an IPv4 literal rather than a name.
func numericPart(p string) bool {
	if hex, ok := strings.CutPrefix(strings.ToLower(p), "0x"); ok {
		return strings.Trim(hex, "0123456789abcdef") == ""
	}
	return p != "" && strings.Trim(p, "0123456789") == ""
}

// parsePart reads one part of an inet_aton address: 0x hexadecimal ("0x" alone is 0), a leading
// 0 octal, else decimal.
func parsePart(p string) (uint64, error) {
	lower := strings.ToLower(p)
	switch {
	case lower == "":
		return 0, errNotAddress
	case strings.HasPrefix(lower, "0x"):
		if lower == "0x" {
			return 0, nil
		}
		return strconv.ParseUint(lower[2:], 16, 32)
	case len(p) > 1 && p[0] == '0':
		return strconv.ParseUint(p[1:], 8, 32)
	}
	return strconv.ParseUint(p, 10, 32)
}
