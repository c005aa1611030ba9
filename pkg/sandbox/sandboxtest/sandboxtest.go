// Package sandboxtest gives tests the bubblewrap sandbox and a workspace root for it.
package sandboxtest

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/sandbox"
)

// Bwrap returns the bubblewrap provider. When bubblewrap cannot run on this machine (not
// installed, or user namespaces not allowed) the test is skipped, or fails when CI is set:
// scripts/ensure-deps.sh installs bubblewrap, and CI must test the sandbox.
func Bwrap(t testing.TB) *sandbox.Bwrap {
	t.Helper()
	return BwrapWith(t, sandbox.BwrapConfig{})
}

// BwrapWith is Bwrap with cfg (its Logger, when nil, discards).
func BwrapWith(t testing.TB, cfg sandbox.BwrapConfig) *sandbox.Bwrap {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	b, err := sandbox.NewBwrap(cfg)
	if err != nil {
		msg := "bubblewrap cannot run here, so the sandbox is not tested (scripts/ensure-deps.sh installs it): " + err.Error()
		if os.Getenv("CI") != "" {
			t.Fatal(msg + " (CI requires the sandbox)")
		}
		t.Skip("SKIP: " + msg)
	}
	return b
}

// WorkspaceRoot returns a fresh directory for sessions' workspaces, removed when the test ends.
// It is mode 0711, so the sandbox's user, who is not its owner, can reach the workspaces in it.
func WorkspaceRoot(t testing.TB) string {
	t.Helper()
	root, err := os.MkdirTemp("", "dshd-ws-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	if err := os.Chmod(root, 0o711); err != nil {
		t.Fatal(err)
	}
	return root
}

// Greeter opens a listener on the host's loopback that writes a greeting to every connection,
// and returns a shell command that connects to it and prints what it reads: the command prints
// the greeting only when it reached this listener, which no sandbox may (the egress network
// refuses the host's addresses too).
func Greeter(t testing.TB) (command, greeting string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	greeting = fmt.Sprintf("hello-from-the-host-%d", time.Now().UnixNano())
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte(greeting + "\n"))
			_ = c.Close()
		}
	}()
	return fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d && read -r line <&3 && echo \"$line\"", ln.Addr().(*net.TCPAddr).Port), greeting
}

// Network fails (CI) or skips the test when b cannot run commands with Spec.Network here
// (pasta, nft or nsenter missing: scripts/ensure-deps.sh installs them). It skips, even in CI,
// when the tests do not run as root, which the network mode needs (as the server does).
func Network(t testing.TB, b *sandbox.Bwrap) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIP: the sandbox's network needs root (the server runs as root)")
	}
	if err := b.NetworkErr(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err.Error() + " (CI requires the sandbox's network)")
		}
		t.Skip("SKIP: " + err.Error())
	}
}

// NetworkProbe is a shell command that prints marker only when the sandbox has an interface
// besides its loopback (the egress network), without sending a packet anywhere.
func NetworkProbe() (command, marker string) {
	return "test $(grep -c : /proc/net/dev) -gt 1 && echo network-is-on", "network-is-on"
}
