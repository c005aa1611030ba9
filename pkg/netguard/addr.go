package netguard

import "net/netip"

// nonPublic are the ranges PublicAddr refuses besides those netip classifies (loopback,
// private, link-local, multicast, unspecified).
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // carrier-grade NAT (some clouds' metadata services)
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // documentation
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, and broadcast
	netip.MustParsePrefix("::/96"),           // IPv4-compatible (deprecated; ::127.0.0.1 reaches loopback on some stacks)
	netip.MustParsePrefix("::ffff:0:0:0/96"), // IPv4-translated (SIIT)
	netip.MustParsePrefix("100::/64"),        // discard
	netip.MustParsePrefix("2001::/23"),       // IETF protocol assignments, Teredo (2001::/32) included
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("fec0::/10"),       // site-local (deprecated, still routed inside some networks)
}

// embedsIPv4 are IPv6 ranges that carry an IPv4 address in their last 32 bits (NAT64), which
// PublicAddr checks in turn.
var embedsIPv4 = []netip.Prefix{
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
}

// PublicAddr reports whether a is a public unicast address: not loopback, private (RFC 1918,
// fc00::/7), link-local (169.254.0.0/16, fe80::/10), unspecified, multicast, carrier-grade NAT,
// reserved or documentation space, nor IPv4-compatible (::/96), IPv4-translated
// (::ffff:0:0:0/96), site-local (fec0::/10) or in the IETF protocol assignments of 2001::/23
// (Teredo included). IPv4-mapped and NAT64 addresses are judged by their IPv4 address; 6to4
// (2002::/16) by the IPv4 address it embeds.
func PublicAddr(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsValid() || a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified() || !a.IsGlobalUnicast() {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(a) {
			return false
		}
	}
	if a.Is6() {
		b := a.As16()
		for _, p := range embedsIPv4 {
			if p.Contains(a) {
				return PublicAddr(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}))
			}
		}
		if b[0] == 0x20 && b[1] == 0x02 { // 6to4
			return PublicAddr(netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}))
		}
	}
	return true
}

// classified are the ranges of the classes PublicAddr takes from netip (loopback, private,
// link-local, multicast, unspecified, and what is not global unicast besides).
var classified = []netip.Prefix{
	netip.MustParsePrefix("127.0.0.0/8"),    // loopback
	netip.MustParsePrefix("10.0.0.0/8"),     // private
	netip.MustParsePrefix("172.16.0.0/12"),  // private
	netip.MustParsePrefix("192.168.0.0/16"), // private
	netip.MustParsePrefix("169.254.0.0/16"), // link-local (cloud metadata services: 169.254.169.254)
	netip.MustParsePrefix("224.0.0.0/4"),    // multicast
	netip.MustParsePrefix("::/128"),         // unspecified
	netip.MustParsePrefix("::1/128"),        // loopback
	netip.MustParsePrefix("fc00::/7"),       // unique local (cloud metadata services: fd00:ec2::254)
	netip.MustParsePrefix("fe80::/10"),      // link-local
	netip.MustParsePrefix("ff00::/8"),       // multicast
}

// NonPublicPrefixes returns every range PublicAddr refuses, for a filter that can match only
// prefixes (the sandbox's egress rules). The IPv6 ranges whose addresses PublicAddr judges by an
// embedded IPv4 address (IPv4-mapped ::ffff:0:0/96, NAT64 64:ff9b::/96 and 64:ff9b:1::/48, 6to4
// 2002::/16) are returned whole, so a filter built from the list refuses a little more than
// PublicAddr, never less (TestNonPublicPrefixesCoverPublicAddr).
// The result is a fresh slice the caller may keep.
func NonPublicPrefixes() []netip.Prefix {
	out := make([]netip.Prefix, 0, len(classified)+len(nonPublic)+len(embedsIPv4)+2)
	out = append(out, classified...)
	out = append(out, nonPublic...)
	out = append(out, embedsIPv4...)
	return append(out, netip.MustParsePrefix("::ffff:0:0/96"), netip.MustParsePrefix("2002::/16"))
}
