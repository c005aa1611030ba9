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

// TestHostAddrReadsIPv4AsInetAton (issue 17, finding 5): webhook registration took 127.1,
// 2130706433 and 0x7f000001 for names, so they passed the public-address check, and resolvers that
// follow inet_aton dial them at 127.0.0.1. HostAddr reads every such form as the address it is.
func TestHostAddrReadsIPv4AsInetAton(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		host string
		want string // the address; "" a name; "error" a numeric host that is no address
	}{
		{"127.0.0.1", "127.0.0.1"},
		{"127.1", "127.0.0.1"},
		{"127.0.1", "127.0.0.1"},
		{"2130706433", "127.0.0.1"},
		{"0x7f000001", "127.0.0.1"},
		{"0X7F000001", "127.0.0.1"},
		{"0x7f.1", "127.0.0.1"},
		{"0177.0.0.1", "127.0.0.1"},
		{"0177.1", "127.0.0.1"},
		{"127.0.0.01", "127.0.0.1"},
		{"127.00.0.1", "127.0.0.1"},
		{"127.0.0.1.", "127.0.0.1"},
		{"017700000001", "127.0.0.1"},
		{"0", "0.0.0.0"},
		{"0x", "0.0.0.0"},
		{"10.1", "10.0.0.1"},
		{"169.254.43518", "169.254.169.254"},
		{"0xa9fea9fe", "169.254.169.254"},
		{"192.168.0x1.1", "192.168.1.1"},
		{"134744072", "8.8.8.8"},
		{"::1", "::1"},
		{"::ffff:127.0.0.1", "::ffff:127.0.0.1"},
		{"hooks.example.com", ""},
		{"localhost", ""},
		{"1.2.3.4.example.com", ""},
		{"0x7g", ""},
		{"127.0.0.1x", ""},
		{"256.0.0.1", "error"},
		{"1.2.3.4.5", "error"},
		{"127.0.0.256", "error"},
		{"127.16777216", "error"},
		{"4294967296", "error"},
		{"0x100000000", "error"},
		{"08.0.0.1", "error"},
		{"127..1", "error"},
		{".1", "error"},
	} {
		a, ok, err := netguard.HostAddr(tc.host)
		got := ""
		switch {
		case err != nil:
			got = "error"
		case ok:
			got = a.String()
		}
		if got != tc.want {
			t.Errorf("HostAddr(%q) = %q (ok %v, err %v), want %q", tc.host, got, ok, err, tc.want)
		}
	}
}

// TestCheckURLRefusesNonCanonicalPrivateIPv4 (issue 17, finding 5): webhook and policy-webhook
// registration accepted https://127.1/, https://2130706433/ and the like. CheckURL now refuses
// them as it refuses https://127.0.0.1/, and a numeric host that is no address; a public address
// in another form is still accepted.
func TestCheckURLRefusesNonCanonicalPrivateIPv4(t *testing.T) {
	t.Parallel()
	for _, host := range []string{"127.1", "2130706433", "0x7f000001", "0177.0.0.1", "127.0.0.01", "127.0.0.1.",
		"0", "10.1", "0xa9fea9fe", "169.254.43518", "0300.0250.1.1"} {
		err := netguard.CheckURL("https://"+host+"/hook", false, false)
		if err == nil || !strings.Contains(err.Error(), "not a public address") {
			t.Errorf("%s: %v, want not a public address", host, err)
		}
		if err := netguard.CheckURL("https://"+host+"/hook", false, true); err != nil {
			t.Errorf("%s with private addresses allowed: %v", host, err)
		}
	}
	for _, host := range []string{"256.0.0.1", "1.2.3.4.5", "4294967296"} {
		if err := netguard.CheckURL("https://"+host+"/hook", false, false); err == nil || !strings.Contains(err.Error(), "not a valid IPv4") {
			t.Errorf("%s: %v, want not a valid IPv4 address", host, err)
		}
	}
	for _, host := range []string{"134744072", "8.8.8.8", "0x08080808", "8.8.2056"} {
		if err := netguard.CheckURL("https://"+host+"/hook", false, false); err != nil {
			t.Errorf("%s (8.8.8.8): %v", host, err)
		}
	}
}

// TestTransportDialsNonCanonicalIPv4AsItsAddress (issue 17, finding 5): at dial time too, a host
// written as 127.1 or 0x7f000001 is dialled as the address it names, never handed to a resolver,
// and so refused as 127.0.0.1 is: no request reaches a server listening there.
func TestTransportDialsNonCanonicalIPv4AsItsAddress(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	guarded := &http.Client{Transport: netguard.NewTransport(netguard.TransportConfig{}), CheckRedirect: netguard.NoRedirects}
	for _, host := range []string{"127.1", "2130706433", "0x7f000001", "0177.0.0.1", "127.0.0.01"} {
		_, err := guarded.Get("http://" + host + ":" + port + "/")
		var np netguard.NotPublicError
		if !errors.As(err, &np) || np.Addr != netip.MustParseAddr("127.0.0.1") {
			t.Errorf("%s: %v, want a NotPublicError for 127.0.0.1", host, err)
		}
	}
	if _, err := guarded.Get("http://256.0.0.1:" + port + "/"); err == nil || !strings.Contains(err.Error(), "not a valid IPv4") {
		t.Errorf("256.0.0.1: %v", err)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("%d requests reached the server", n)
	}
	open := &http.Client{Transport: netguard.NewTransport(netguard.TransportConfig{AllowPrivate: true})}
	resp, err := open.Get("http://127.1:" + port + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if n := hits.Load(); n != 1 {
		t.Fatalf("hits %d, want 1", n)
	}
}
