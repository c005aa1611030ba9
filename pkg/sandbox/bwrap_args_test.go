package sandbox

import (
	"slices"
	"testing"
)

// TestBwrapArgsNeverShareTheHostNetwork: no sandbox keeps the host's network namespace
// (bubblewrap --share-net), with the network or without it: every one unshares all namespaces,
// and the network's arguments only add the pipes through which the server sets the egress
// network up before the command starts (the launch's --info-fd and --block-fd, launch.go) and
// the sandbox's resolv.conf.
// Before the egress network, Spec.Network added --share-net (issue 17).
func TestBwrapArgsNeverShareTheHostNetwork(t *testing.T) {
	t.Parallel()
	b := &Bwrap{system: systemBinds()}
	for _, network := range []bool{false, true} {
		args := b.baseArgs(network)
		if !slices.Contains(args, "--unshare-all") || slices.Contains(args, "--share-net") {
			t.Errorf("network %v: %q", network, args)
		}
	}
	n, err := (&egress{}).prepare(firstExtraFD)
	if err != nil {
		t.Fatal(err)
	}
	defer n.finish()
	want := []string{"--ro-bind-data", "6", "/etc/resolv.conf"}
	if !slices.Equal(n.args, want) {
		t.Errorf("the network's arguments: %q, want %q", n.args, want)
	}
}
