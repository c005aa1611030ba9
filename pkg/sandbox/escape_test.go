package sandbox_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dshd/dshd/pkg/sandbox"
)

// The sandbox's escape suite: what a tenant's command tries in order to reach the host, each case
// run in the real bubblewrap sandbox (CI fails, not skips, without it: sandboxtest.Bwrap). The
// threat model it checks is in docs/sandbox.md ("What a tenant can and cannot do"). The cases that
// need more than one command, or a test of their own, live beside it: the fork bomb
// (TestBwrapForkBombIsContained), detached processes and cancel (TestBwrapTimeoutAndCancelKillTheProcessTree),
// huge output (TestBwrapOutputIsCapped), the network (TestBwrapHasNoNetwork), the host's
// directories (TestBwrapWorkspaceIsTheOnlyWritableHostDirectory) and the server's environment
// (TestBwrapEnvironmentIsMinimal).

// escapeCanary is set in the test process's environment and written to a host file outside the
// workspace root: no case may ever print it.
const escapeCanary = "dshd-escape-canary-7f3a91"

// TestEscapeSuiteHostIsUnreachable runs each hostile command in a fresh sandbox and checks that
// it fails (or shows only the sandbox's own view) and never prints a host secret: the server's
// environment, a host file, another session's file.
func TestEscapeSuiteHostIsUnreachable(t *testing.T) {
	t.Setenv("DSHD_ESCAPE_CANARY", escapeCanary)
	b := bwrapOrSkip(t)
	w := workspaces(t, ownerOf(b))
	ws, other := open(t, w, "attacker"), open(t, w, "victim")
	if err := os.WriteFile(filepath.Join(other.Dir, "secret"), []byte(escapeCanary), 0o644); err != nil {
		t.Fatal(err)
	}
	hostDir := t.TempDir()
	hostFile := filepath.Join(hostDir, "host-secret")
	if err := os.WriteFile(hostFile, []byte(escapeCanary), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(hostDir, 0o755); err != nil {
		t.Fatal(err)
	}
	serverPID := os.Getpid()
	for _, c := range []struct {
		name, cmd string
		// ok says whether the command's own exit status must be 0 (it only shows the sandbox's
		// view) rather than a failure.
		ok bool
		// want is text the output must contain (the sandbox's own view), when set.
		want string
	}{
		// /proc: a fresh PID namespace; the server and every host process are invisible.
		{name: "proc environ of every visible process", cmd: "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; true", ok: true},
		{name: "proc cmdline of every visible process", cmd: "cat /proc/*/cmdline 2>/dev/null | tr '\\0' '\\n'; true", ok: true},
		{name: "the server's pid", cmd: fmt.Sprintf("kill -0 %d", serverPID)},
		{name: "the server's proc entry", cmd: fmt.Sprintf("cat /proc/%d/environ", serverPID)},
		{name: "only the sandbox's processes", cmd: "n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo procs=$n; [ $n -le 4 ]", ok: true, want: "procs="},
		{name: "proc root link", cmd: "cat /proc/1/root" + hostFile},
		// Links: a symbolic link resolves inside the sandbox's own view.
		{name: "symlink to a host file", cmd: "ln -s " + hostFile + " l && cat l"},
		{name: "symlink to shadow", cmd: "ln -s /etc/shadow s && cat s"},
		{name: "symlink to the root", cmd: "ln -s / r && ls r/ && cat r" + hostFile},
		{name: "symlink to the other workspace", cmd: "ln -s " + other.Dir + "/secret o && cat o"},
		// `..`: the workspace's parent is the sandbox's root, not the workspace root.
		{name: "dot-dot to the workspace root", cmd: "cat /workspace/../victim/files/secret"},
		{name: "dot-dot many", cmd: "cd /workspace/../../../.. && cat ." + hostFile},
		{name: "host path of the other workspace", cmd: "cat " + other.Dir + "/secret"},
		// Hard links across the mount boundary, and of files the sandbox cannot see.
		{name: "hard link to a system file", cmd: "ln /usr/bin/bash h"},
		{name: "hard link to a host file", cmd: "ln " + hostFile + " h2"},
		// FIFOs and devices: a FIFO is the sandbox's own; no device node can be made or reached.
		{name: "fifo is local", cmd: "mkfifo p && ls -l p | cut -c1", ok: true, want: "p"},
		{name: "device node", cmd: "mknod d b 8 0"},
		{name: "disk device", cmd: "ls /dev/sda /dev/vda /dev/nvme0n1 /dev/mem /dev/kmem"},
		// Privilege: no capability, no nested user namespace, no mount.
		{name: "nested user namespace", cmd: "unshare -U true"},
		{name: "mount", cmd: "mount -t tmpfs none /workspace"},
		{name: "chroot", cmd: "chroot / true"},
		{name: "write the system", cmd: "echo x > /usr/bin/x"},
		{name: "sysfs", cmd: "ls /sys/fs/cgroup"},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := runOK(t, b, sandbox.Spec{Workspace: ws.Dir, Command: c.cmd})
			out := res.Stdout + res.Stderr
			if strings.Contains(out, escapeCanary) {
				t.Fatalf("%q printed a host secret: %+v", c.cmd, res)
			}
			if c.ok != (res.ExitCode == 0) {
				t.Fatalf("%q: exit %d, want success %v: %+v", c.cmd, res.ExitCode, c.ok, res)
			}
			if c.want != "" && !strings.Contains(out, c.want) {
				t.Fatalf("%q: no %q in %+v", c.cmd, c.want, res)
			}
		})
	}
}
