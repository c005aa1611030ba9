package sandbox

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"

	"github.com/dshd/dshd/pkg/netguard"
)

// The egress network's nftables rules (egress.go): what a sandbox with Spec.Network may not
// reach.

// egressRules is the nftables ruleset of a sandbox with the egress network: its own loopback,
// DNS to egressDNS and IPv6 neighbour discovery (which pasta answers itself; the kernel sends it
// to multicast addresses, which are refused otherwise) pass; every non-public range, and every
// address in deny (the host's and BwrapConfig.EgressDeny), is refused at once (a TCP reset, an ICMP error for the rest, so
// a connect fails fast instead of timing out); nothing comes in but the answers to its own
// connections and neighbour discovery.
func egressRules(deny []netip.Prefix) string {
	var v4, v6 []string
	for _, p := range collapse(append(netguard.NonPublicPrefixes(), deny...)) {
		if p.Addr().Is4() {
			v4 = append(v4, p.String())
		} else {
			v6 = append(v6, p.String())
		}
	}
	var b strings.Builder
	b.WriteString("table inet dshd_egress {\n")
	fmt.Fprintf(&b, "\tset deny4 { type ipv4_addr; flags interval; elements = { %s } }\n", strings.Join(v4, ", "))
	fmt.Fprintf(&b, "\tset deny6 { type ipv6_addr; flags interval; elements = { %s } }\n", strings.Join(v6, ", "))
	b.WriteString("\tchain output {\n\t\ttype filter hook output priority filter; policy accept;\n" +
		"\t\toifname \"lo\" accept\n" +
		"\t\tip daddr " + egressDNS + " meta l4proto { tcp, udp } th dport 53 accept\n" +
		"\t\tip6 hoplimit 255 icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert, nd-router-solicit } accept\n" +
		"\t\tip daddr @deny4 meta l4proto tcp reject with tcp reset\n" +
		"\t\tip6 daddr @deny6 meta l4proto tcp reject with tcp reset\n" +
		"\t\tip daddr @deny4 reject with icmpx type admin-prohibited\n" +
		"\t\tip6 daddr @deny6 reject with icmpx type admin-prohibited\n\t}\n")
	b.WriteString("\tchain input {\n\t\ttype filter hook input priority filter; policy drop;\n" +
		"\t\tiifname \"lo\" accept\n" +
		"\t\tct state established,related accept\n" +
		"\t\ticmpv6 type { nd-neighbor-solicit, nd-neighbor-advert, nd-router-advert } accept\n\t}\n")
	b.WriteString("}\n")
	return b.String()
}

// collapse drops the prefixes that another one of ps contains (nft refuses overlapping
// elements), and sorts none: the order is ps's.
func collapse(ps []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for i, p := range ps {
		p = p.Masked()
		inside := false
		for j, q := range ps {
			q = q.Masked()
			if i != j && q.Addr().Is4() == p.Addr().Is4() && q.Bits() <= p.Bits() && q.Contains(p.Addr()) &&
				(q.Bits() < p.Bits() || j < i) {
				inside = true
				break
			}
		}
		if !inside {
			out = append(out, p)
		}
	}
	return out
}

// hostAddrs returns every address of the host's interfaces and its gateways (IPv4 and IPv6
// default and other routes' next hops), each as a single-address prefix, read now: the egress
// rules refuse them whatever range they are in.
func hostAddrs() []netip.Prefix {
	var out []netip.Prefix
	add := func(a netip.Addr) {
		if a.IsValid() && !a.IsUnspecified() {
			a = a.Unmap()
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				ip, _ := netip.AddrFromSlice(ipn.IP)
				add(ip)
			}
		}
	}
	for _, gw := range gateways() {
		add(gw)
	}
	return out
}

// gateways reads the next hops of the host's routes from /proc/net/route and ipv6_route.
func gateways() []netip.Addr {
	var out []netip.Addr
	eachLine("/proc/net/route", func(f []string) {
		if len(f) > 2 && len(f[2]) == 8 {
			if b, err := hex.DecodeString(f[2]); err == nil {
				out = append(out, netip.AddrFrom4([4]byte{b[3], b[2], b[1], b[0]}))
			}
		}
	})
	eachLine("/proc/net/ipv6_route", func(f []string) {
		if len(f) > 4 && len(f[4]) == 32 {
			if b, err := hex.DecodeString(f[4]); err == nil {
				out = append(out, netip.AddrFrom16([16]byte(b)))
			}
		}
	})
	return out
}

func eachLine(path string, fn func([]string)) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fn(strings.Fields(s.Text()))
	}
}
