package sandbox

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// BwrapConfig configures the bwrap provider.
type BwrapConfig struct {
	// Path is the bwrap binary. Default: "bwrap" on PATH.
	Path string
	// UID and GID are the host user and group commands run as when the server runs as root
	// (bubblewrap then runs unprivileged as them, in a user namespace of their own): root is
	// exempt from the process-count limit, and must never own a sandbox. Default 65534
	// (nobody). Ignored when the server is not root: commands run as the server's user.
	UID, GID int
	// Limits are every command's limits; zero fields take DefaultLimits.
	Limits Limits
	// OutputBytes is how much of each output stream a Result keeps. Default DefaultOutputBytes.
	OutputBytes int
	// TmpBytes and ShmBytes size the sandbox's two writable memory filesystems, /tmp and
	// /dev/shm (tmpfs: what is written there is host memory). Defaults DefaultTmpBytes and
	// DefaultShmBytes. / and /dev are read-only.
	TmpBytes, ShmBytes int64
	// MemoryBytes bounds each command's memory as a whole (its processes' memory and what they
	// write to /tmp and /dev/shm) with a memory cgroup of its own, where the host gives the
	// server a writable one (cgroup.go). Default DefaultMemoryBytes; negative: no cgroup.
	MemoryBytes int64
	// Nice is the CPU priority (nice value, 0 to 19) of every command, so that commands yield
	// the CPU to the server. Default DefaultNice; negative: the server's own.
	Nice int
	// Logger gets the one startup line that says how memory is bounded. Default slog.Default().
	Logger *slog.Logger
	// PastaPath and NftPath are the egress network's tools (Spec.Network, egress.go). Default:
	// "pasta" and "nft" on PATH or in /usr/sbin, /usr/bin.
	PastaPath, NftPath string
	// EgressDeny are ranges the egress network refuses on top of the non-public ones and the
	// host's own addresses (DSHD_SANDBOX_EGRESS_DENY): the addresses of the node the server's
	// container runs on, the operator's other public services. Default none.
	EgressDeny []netip.Prefix
}

// Defaults of BwrapConfig.
const (
	DefaultTmpBytes    = 256 << 20
	DefaultShmBytes    = 64 << 20
	DefaultMemoryBytes = 1 << 30
	DefaultNice        = 10
)

// Bwrap runs commands in bubblewrap sandboxes. What holds:
//
//   - Filesystem: only /usr (with the /bin, /lib, /sbin links of a merged-/usr system, or those
//     directories read-only), a few harmless /etc entries (alternatives, ld.so, TLS certificates,
//     hosts, nsswitch, localtime; with the network a resolv.conf of its own), a fresh /proc, a
//     minimal /dev and an empty /tmp are visible; the session's workspace is the only writable host directory, at
//     WorkspacePath. No other workspace, no /home, /root, /etc/shadow or server file is mounted.
//     / and /dev are read-only; /tmp and /dev/shm are tmpfs of TmpBytes and ShmBytes.
//   - Arguments: bubblewrap reads its options from a pipe (--args), so no /proc/*/cmdline inside
//     shows a host path (the workspace's is only in bwrap's options).
//   - Network: none (a new network namespace with only its own loopback) unless Spec.Network,
//     which adds egress to public addresses only, through pasta, with nftables rules refusing the
//     host's addresses, its gateways and every non-public range (egress.go).
//   - Identity: a new user namespace with no capabilities and nested user namespaces disabled;
//     run by a server that is root, the sandbox is BwrapConfig.UID on the host.
//   - Environment: empty, then the minimal PATH, HOME, LANG, TMPDIR and Spec.Env.
//   - Limits: ulimit in the shell line (CPU time, address space, file size, open files, and
//     processes counted in the sandbox's own user namespace, so a fork bomb stops at the limit);
//     the whole command's memory (tmpfs included) by a memory cgroup of MemoryBytes where the
//     host gives the server a writable one (cgroup.go), else by the address-space limit per
//     process and the sized tmpfs mounts only. Commands run at nice Nice.
//   - Lifetime: bwrap is the init of a new PID namespace, in a process group of its own; on the
//     timeout or cancel the group is killed, the namespace's init dies and the kernel kills every
//     process in it. --die-with-parent ends the sandbox if the server dies.
//
// What does not hold: no seccomp filter (the kernel's whole syscall surface is reachable, as it
// is for any unprivileged user), no disk quota here on what a command writes (only RLIMIT_FSIZE
// per file; the file tools check the workspace and tenant bounds, and the bash tool's watchdog
// stops a command that takes the tenant over its bound), no CPU share beyond the nice value, and
// /proc/self/mountinfo shows the workspace's path within its host filesystem.
type Bwrap struct {
	cfg  BwrapConfig
	bin  string
	cred *syscall.Credential
	// cgroups makes each command's memory cgroup; nil when the host gives none.
	cgroups *cgroupParent
	// system mounts the host's read-only system entries: bwrap arguments, computed once.
	system []string
	// net is the egress network's tools (Spec.Network, egress.go).
	net egress
}

// NewBwrap finds bubblewrap and checks that it can run here (user namespaces are allowed): it
// returns an error saying why not otherwise.
func NewBwrap(cfg BwrapConfig) (*Bwrap, error) {
	if cfg.Path == "" {
		cfg.Path = "bwrap"
	}
	if cfg.UID == 0 {
		cfg.UID = 65534
	}
	if cfg.GID == 0 {
		cfg.GID = 65534
	}
	cfg.Limits = cfg.Limits.or(DefaultLimits)
	if cfg.OutputBytes <= 0 {
		cfg.OutputBytes = DefaultOutputBytes
	}
	cfg.TmpBytes = cmp.Or(max(cfg.TmpBytes, 0), DefaultTmpBytes)
	cfg.ShmBytes = cmp.Or(max(cfg.ShmBytes, 0), DefaultShmBytes)
	cfg.MemoryBytes = cmp.Or(cfg.MemoryBytes, DefaultMemoryBytes)
	cfg.Nice = min(cmp.Or(cfg.Nice, DefaultNice), 19)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	bin, err := exec.LookPath(cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("sandbox: bubblewrap not found (install the bubblewrap package: scripts/ensure-deps.sh): %w", err)
	}
	b := &Bwrap{cfg: cfg, bin: bin, system: systemBinds(), net: findEgress(cfg.PastaPath, cfg.NftPath, cfg.EgressDeny)}
	if os.Geteuid() == 0 {
		b.cred = &syscall.Credential{Uid: uint32(cfg.UID), Gid: uint32(cfg.GID), NoSetGroups: false}
	}
	if err := b.probe(); err != nil {
		return nil, err
	}
	b.findCgroups()
	return b, nil
}

// findCgroups finds where the commands' memory cgroups go and says once how memory is bounded.
func (b *Bwrap) findCgroups() {
	if b.cfg.MemoryBytes < 0 {
		b.cfg.Logger.Info("sandbox: no memory cgroup (configured off): a command's memory is bounded per process and by the sized /tmp and /dev/shm")
		return
	}
	p, err := findCgroupParent()
	if err != nil {
		b.cfg.Logger.Warn("sandbox: no writable memory cgroup: a command's memory is bounded per process (address space) and by the sized /tmp and /dev/shm only",
			"reason", err.Error())
		return
	}
	b.cgroups = p
	b.cfg.Logger.Info("sandbox: each command's memory is bounded by a memory cgroup", "cgroup", p.String(), "bytes", b.cfg.MemoryBytes)
}

// MemoryBound returns the bytes each command's memory cgroup allows, 0 when commands get none.
func (b *Bwrap) MemoryBound() int64 {
	if b.cgroups == nil {
		return 0
	}
	return b.cfg.MemoryBytes
}

// Name implements Provider.
func (b *Bwrap) Name() string { return "bwrap" }

// Owner returns the host user and group that own what sandboxes write, and whether the server
// must hand them the workspace (it is root; otherwise the sandbox runs as the server's user).
func (b *Bwrap) Owner() (uid, gid int, ok bool) {
	if b.cred == nil {
		return 0, 0, false
	}
	return b.cfg.UID, b.cfg.GID, true
}

// probe runs `true` in the sandbox configuration without a workspace.
func (b *Bwrap) probe() error {
	l, err := b.launcher(append(b.baseArgs(false), sealArgs...), []string{"/bin/true"}, nil)
	if err != nil {
		return err
	}
	cmd := l.cmd
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		l.close()
		return fmt.Errorf("sandbox: bubblewrap cannot start: %w", err)
	}
	defer l.close()
	if err := l.started(context.Background()); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return err
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("sandbox: bubblewrap cannot run here (are unprivileged user namespaces allowed?): %v: %s",
				err, bytes.TrimSpace(stderr.Bytes()))
		}
		return nil
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		return errors.New("sandbox: bubblewrap did not finish `true` in 30s")
	}
}

// baseArgs are the namespace, lifetime and system arguments of every sandbox.
func (b *Bwrap) baseArgs(network bool) []string {
	args := []string{"--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL",
		"--die-with-parent", "--new-session", "--hostname", "sandbox"}
	args = append(args, b.system...)
	return append(args, "--proc", "/proc", "--dev", "/dev",
		"--size", strconv.FormatInt(b.cfg.ShmBytes, 10), "--tmpfs", "/dev/shm",
		"--size", strconv.FormatInt(b.cfg.TmpBytes, 10), "--tmpfs", "/tmp", "--clearenv")
}

// sealArgs come after every mount: / (bwrap's own tmpfs, of the kernel's default size) and /dev
// become read-only, so that /tmp, /dev/shm and the workspace are all a command can write.
var sealArgs = []string{"--remount-ro", "/dev", "--remount-ro", "/"}

// systemBinds mounts /usr read-only and mirrors the root entries that point into it.
func systemBinds() []string {
	args := []string{"--ro-bind", "/usr", "/usr"}
	for _, p := range []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink(p); err == nil {
				args = append(args, "--symlink", target, p)
			}
		case fi.IsDir():
			args = append(args, "--ro-bind", p, p)
		}
	}
	for _, p := range []string{"/etc/alternatives", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
		"/etc/ssl", "/etc/ca-certificates", "/etc/hosts", "/etc/nsswitch.conf", "/etc/localtime"} {
		args = append(args, "--ro-bind-try", p, p)
	}
	return args
}

// Run implements Provider.
func (b *Bwrap) Run(ctx context.Context, spec Spec) (Result, error) {
	if spec.Workspace == "" {
		return Result{}, errors.New("sandbox: spec has no workspace")
	}
	dir := path.Join(WorkspacePath, path.Clean("/"+spec.Dir))
	args := b.baseArgs(spec.Network)
	var egress *egressRun // the network (egress.go): its pipe follows the launch's (launch.go)
	if spec.Network {
		var err error
		if egress, err = b.net.prepare(firstExtraFD); err != nil {
			return Result{}, err
		}
		defer egress.finish()
		args = append(args, egress.args...)
	}
	args = append(args, "--bind", spec.Workspace, WorkspacePath, "--chdir", dir)
	for _, kv := range environ(WorkspacePath, spec.Env) {
		k, v, _ := strings.Cut(kv, "=")
		args = append(args, "--setenv", k, v)
	}
	args = append(args, sealArgs...)
	l, err := b.launcher(args, append([]string{"/bin/bash"},
		shellArgs("/bin/bash", spec.Limits.or(b.cfg.Limits), true, spec.Command)...), egress)
	if err != nil {
		return Result{}, err
	}
	defer l.close()
	res, err := run(ctx, l.cmd, spec.Timeout, b.cfg.OutputBytes, killGroup, l)
	if l.group != nil {
		res.MemoryBytes = b.cfg.MemoryBytes
		res.OOMKilled, res.MemoryPeakBytes = l.memory()
	}
	return res, err
}

// NetworkErr says why Spec.Network cannot run here (pasta, nft or nsenter missing, or the
// server is not root), nil when it can (ProbeNetwork also runs it): such a command then fails with this error, and commands without it are unaffected.
func (b *Bwrap) NetworkErr() error { return b.net.err }

// killGroup kills the process group led by pid. For bwrap that is bwrap and the init of the
// sandbox's PID namespace, whose death takes every process of the namespace with it.
func killGroup(pid int) { _ = syscall.Kill(-pid, syscall.SIGKILL) }
