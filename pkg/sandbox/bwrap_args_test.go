package sandbox

import (
	"slices"
	"testing"
)

// TestBwrapArgsFollowNetwork: the network setting reaches bubblewrap's arguments: every sandbox
// unshares all namespaces, and only one with the network adds --share-net (which keeps the
// host's network namespace) and the host's resolv.conf.
func TestBwrapArgsFollowNetwork(t *testing.T) {
	t.Parallel()
	b := &Bwrap{system: systemBinds()}
	off, on := b.baseArgs(false), b.baseArgs(true)
	if !slices.Contains(off, "--unshare-all") || slices.Contains(off, "--share-net") || slices.Contains(off, "/etc/resolv.conf") {
		t.Errorf("without the network: %q", off)
	}
	if !slices.Contains(on, "--unshare-all") || !slices.Contains(on, "--share-net") || !slices.Contains(on, "/etc/resolv.conf") {
		t.Errorf("with the network: %q", on)
	}
	if i, j := slices.Index(on, "--unshare-all"), slices.Index(on, "--share-net"); i > j {
		t.Errorf("--share-net must follow --unshare-all: %q", on)
	}
}
