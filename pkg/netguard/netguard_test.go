package netguard_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/dshd/dshd/pkg/netguard"
)

func TestPublicAddr(t *testing.T) {
	t.Parallel()
	for addr, public := range map[string]bool{
		"8.8.8.8": true, "2606:4700::1111": true, "93.184.216.34": true,
		"127.0.0.1": false, "::1": false, "10.1.2.3": false, "172.16.0.1": false, "192.168.1.1": false,
		"169.254.169.254": false, "fe80::1": false, "fd00:ec2::254": false, "0.0.0.0": false, "::": false,
		"100.100.100.200": false, "224.0.0.1": false, "255.255.255.255": false, "::ffff:127.0.0.1": false,
		"::ffff:8.8.8.8": true, "64:ff9b::a9fe:a9fe": false, "2002:7f00:1::": false, "2002:808:808::": true,
	} {
		if got := netguard.PublicAddr(netip.MustParseAddr(addr)); got != public {
			t.Errorf("PublicAddr(%s) = %v, want %v", addr, got, public)
		}
	}
}

// TestPublicAddrRefusesIPv6Forms: the IPv6 forms that embed or reach a private IPv4 address, or
// are not globally routable, are refused; public neighbours of those ranges are not.
func TestPublicAddrRefusesIPv6Forms(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		addr   string
		public bool
		why    string
	}{
		{"::127.0.0.1", false, "IPv4-compatible loopback (::/96)"},
		{"::8.8.8.8", false, "IPv4-compatible, deprecated (::/96)"},
		{"::ffff:0:7f00:1", false, "IPv4-translated loopback (::ffff:0:0:0/96)"},
		{"::ffff:0:a00:1", false, "IPv4-translated private (::ffff:0:0:0/96)"},
		{"fec0::1", false, "site-local (fec0::/10)"},
		{"feff:ffff::1", false, "site-local, last of fec0::/10"},
		{"2001::1", false, "Teredo (2001::/32)"},
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", false, "Teredo"},
		{"2001:1ff::1", false, "IETF protocol assignments, last of 2001::/23"},
		{"2001:200::1", true, "public, just after 2001::/23"},
		{"2001:4860:4860::8888", true, "public"},
		{"::ffff:8.8.8.8", true, "IPv4-mapped public"},
	} {
		if got := netguard.PublicAddr(netip.MustParseAddr(tc.addr)); got != tc.public {
			t.Errorf("PublicAddr(%s) = %v, want %v (%s)", tc.addr, got, tc.public, tc.why)
		}
	}
}

func TestCheckURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url           string
		http, private bool
		want          string // "" accepted, else a part of the error
	}{
		{"https://hooks.example.com/x", false, false, ""},
		{"http://hooks.example.com/x", false, false, "this server allows no http webhooks"},
		{"http://hooks.example.com/x", true, false, ""},
		{"ftp://hooks.example.com/x", true, true, `got scheme "ftp"`},
		{"https://user:pw@hooks.example.com/x", false, false, "no credentials"},
		{"https://hooks.example.com/x#f", false, false, "no fragment"},
		{"/relative", false, false, "absolute"},
		{"https://localhost/x", false, false, "loopback name"},
		{"https://a.localhost./x", false, false, "loopback name"},
		{"https://127.0.0.1/x", false, false, "not a public address"},
		{"https://[::1]:8443/x", false, false, "not a public address"},
		{"https://169.254.169.254/latest", false, false, "not a public address"},
		{"https://[::127.0.0.1]/x", false, false, "not a public address"},
		{"https://[2001::1]/x", false, false, "not a public address"},
		{"https://10.0.0.1/x", false, true, ""},
		{"http://127.0.0.1:9/x", true, true, ""},
	} {
		err := netguard.CheckURL(tc.url, tc.http, tc.private)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.url, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want %q", tc.url, err, tc.want)
		}
	}
}

// TestTransportRefusesPrivateAddressesWhenDialling: a transport without AllowPrivate refuses
// 127.0.0.1 by IP and by a name that resolves to it (the server never sees a request); with
// AllowPrivate it connects.
func TestTransportRefusesPrivateAddressesWhenDialling(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	guarded := &http.Client{Transport: netguard.NewTransport(netguard.TransportConfig{}), CheckRedirect: netguard.NoRedirects}
	for _, u := range []string{srv.URL, "http://localhost:" + port} {
		_, err := guarded.Get(u)
		var np netguard.NotPublicError
		if !errors.As(err, &np) || !np.Addr.IsLoopback() {
			t.Fatalf("%s: %v, want a NotPublicError", u, err)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("%d requests reached the server", n)
	}
	open := &http.Client{Transport: netguard.NewTransport(netguard.TransportConfig{AllowPrivate: true})}
	resp, err := open.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if n := hits.Load(); n != 1 {
		t.Fatalf("hits %d, want 1", n)
	}
}
