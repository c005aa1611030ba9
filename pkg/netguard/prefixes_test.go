package netguard_test

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/dshd/dshd/pkg/netguard"
)

// TestNonPublicPrefixesCoverPublicAddr: the ranges the sandbox's egress filter is built from
// and PublicAddr, the webhooks' rule, cannot drift apart: every address PublicAddr refuses lies
// in one of NonPublicPrefixes (checked on the ends of every range and on a fixed sample of the
// whole IPv4 space and of IPv6 space), and every range but those judged by an embedded IPv4
// address holds no address PublicAddr accepts at its ends.
func TestNonPublicPrefixesCoverPublicAddr(t *testing.T) {
	t.Parallel()
	prefixes := netguard.NonPublicPrefixes()
	covered := func(a netip.Addr) bool {
		for _, p := range prefixes {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	embeds := map[string]bool{"::ffff:0.0.0.0/96": true, "64:ff9b::/96": true, "64:ff9b:1::/48": true, "2002::/16": true}
	for _, p := range prefixes {
		first, last := p.Masked().Addr(), lastOf(p)
		if !embeds[p.String()] && (netguard.PublicAddr(first) || netguard.PublicAddr(last)) {
			t.Errorf("%s holds public addresses (%s or %s)", p, first, last)
		}
		for _, a := range []netip.Addr{first, last, first.Prev(), last.Next()} {
			if a.IsValid() && !netguard.PublicAddr(a) && !covered(a) {
				t.Errorf("%s is not public but no prefix covers it", a)
			}
		}
	}
	r := rand.New(rand.NewPCG(17, 17))
	for range 200000 {
		v4 := netip.AddrFrom4([4]byte{byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32())})
		var b [16]byte
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		b[0] = []byte{0x00, 0x01, 0x20, 0x26, 0x64, 0xfc, 0xfd, 0xfe, 0xff}[r.IntN(9)]
		for _, a := range []netip.Addr{v4, netip.AddrFrom16(b)} {
			if !netguard.PublicAddr(a) && !covered(a) {
				t.Fatalf("%s is not public but no prefix covers it", a)
			}
		}
	}
}

// lastOf returns the last address of p.
func lastOf(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}
