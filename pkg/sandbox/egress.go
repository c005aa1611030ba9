package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The egress network (Spec.Network): the sandbox keeps the network namespace of its own that
// bubblewrap makes, and pasta (Debian's passt package) attaches to it, giving it one interface
// whose connections pasta makes again from the host, as the host's own sockets. Before that, and
// before the command's first instruction, nftables rules are loaded into the namespace that
// refuse every destination that is not public (netguard.NonPublicPrefixes), every address of the
// host's interfaces and its gateways, and the operator's ranges (BwrapConfig.EgressDeny). The order, for one command:
//
//  1. bwrap starts with --info-fd and --block-fd: it makes the namespaces, writes the sandbox's
//     PID and blocks before it runs the command;
//  2. the server (root) opens the sandbox's network namespace and, through the namespace, the
//     user namespace that owns it; it loads the rules with nft in that network namespace;
//  3. it runs pasta on the two namespaces (no port forwarded either way, --no-map-gw, DNS
//     queries to egressDNS forwarded to the host's resolver), in the foreground and inside the
//     sandbox's PID namespace (nsenter --pid), and waits until pasta has set the interface up:
//     pasta writes its PID file then, and the file is a FIFO the server reads;
//  4. it writes to the block pipe: the command starts. A failure in 2 or 3 kills the sandbox
//     instead (closing the pipe unwritten would let the command start).
//
// The command runs as an unprivileged user in a user namespace nested below the one that owns
// the network namespace, with no capabilities: it can neither change the rules nor the routes.
// pasta would not quit by itself when the sandbox ends (it holds the network namespace), and a
// parent-death signal does not survive its change of credentials; so it runs in the sandbox's
// PID namespace, whose end (the sandbox's init exits, or the server dies and bubblewrap with it)
// kills it with every other process there. It runs as root (it opens /dev/net/tun, which may be
// root's only), confined by its own isolation (a user namespace of its own, seccomp), and the
// command (another user, without capabilities) can neither signal nor trace it. finish kills the
// sandbox's init and waits for pasta's end.

// egressDNS is the address the sandbox's resolv.conf names: pasta forwards DNS queries sent to
// it to the host's first resolver, and the rules let port 53 to it through. It is link-local, so
// nothing else is reached through it.
const egressDNS = "169.254.1.53"

// egressSetupTimeout bounds steps 2 and 3.
const egressSetupTimeout = 20 * time.Second

// egress is the network mode's tools, found once.
type egress struct {
	pasta, nft, nsenter string
	// deny is BwrapConfig.EgressDeny: refused besides the non-public ranges and the host's
	// addresses.
	deny []netip.Prefix
	// err says why the mode cannot run here (a tool missing); nil when it can.
	err error
}

// findEgress looks for pasta, nft and nsenter on PATH and in /usr/sbin and /usr/bin; pasta and
// nft are the given paths when they are not empty. The mode also needs root. deny is refused
// besides the non-public ranges and the host's addresses.
func findEgress(pasta, nft string, deny []netip.Prefix) egress {
	e := egress{deny: slices.Clone(deny)}
	var missing []string
	for _, t := range []struct {
		name, pkg string
		dst       *string
	}{{orDefault(pasta, "pasta"), "passt", &e.pasta}, {orDefault(nft, "nft"), "nftables", &e.nft}, {"nsenter", "util-linux", &e.nsenter}} {
		p, err := lookTool(t.name)
		if err != nil {
			missing = append(missing, t.name+" (package "+t.pkg+")")
			continue
		}
		*t.dst = p
	}
	switch {
	case len(missing) > 0:
		e.err = fmt.Errorf("sandbox: the network mode needs %s, not found (scripts/ensure-deps.sh installs them)",
			strings.Join(missing, ", "))
	case os.Geteuid() != 0:
		e.err = errors.New("sandbox: the network mode needs the server to run as root (it sets up each " +
			"sandbox's network namespace from outside)")
	}
	if e.err == nil {
		sweepPastaDirs()
	}
	return e
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func lookTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil || strings.Contains(name, "/") {
		return p, err
	}
	for _, dir := range []string{"/usr/sbin", "/usr/bin", "/sbin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

// egressRun is the network of one command: the resolv.conf it mounts and its pasta. The launch
// (launch.go) calls attach while bubblewrap waits for it, once its child is in the command's
// cgroup; finish runs once bwrap has exited.
type egressRun struct {
	e *egress
	// files are bwrap's ends of the pipes (its ExtraFiles, in the order of args); closed once
	// bwrap has them, or by finish.
	files []*os.File
	args  []string
	err   error
	// child is a pidfd of the sandbox's init (the first process of its PID namespace), -1
	// until attach has it. pastaDone is closed when pasta has exited and been waited for; nil
	// until pasta started.
	child     int
	pastaDone chan struct{}
	dir       string
}

// prepare makes the resolv.conf pipe of one command. Its file becomes the command's ExtraFiles
// entry for fd firstFD, as args says.
func (e *egress) prepare(firstFD int) (*egressRun, error) {
	if e.err != nil {
		return nil, e.err
	}
	n := &egressRun{e: e, child: -1}
	resolvR, resolvW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox: pipe: %w", err)
	}
	_, _ = resolvW.WriteString("nameserver " + egressDNS + "\noptions edns0 trust-ad\n") // fits a pipe's buffer
	resolvW.Close()
	n.files = []*os.File{resolvR}
	n.args = []string{"--ro-bind-data", strconv.Itoa(firstFD), "/etc/resolv.conf"}
	return n, nil
}

// attachPid sets the network of the sandbox whose init is pid up (the rules, then pasta) while
// bubblewrap waits; on an error the sandbox is killed before the command starts, and finish
// returns the error too.
func (n *egressRun) attachPid(ctx context.Context, pid int) error {
	n.err = n.setup(ctx, pid)
	return n.err
}

// setup loads the rules and starts pasta, within egressSetupTimeout.
func (n *egressRun) setup(ctx context.Context, pid int) error {
	ctx, cancel := context.WithTimeout(ctx, egressSetupTimeout)
	defer cancel()
	child, err := pidfdOpen(pid)
	if err != nil {
		return fmt.Errorf("sandbox: the network: the sandbox is gone: %w", err)
	}
	n.child = child // closed by finish
	if err := n.attach(ctx, pid, child); err != nil {
		_ = pidfdSignal(child, syscall.SIGKILL) // never let the command start without the rules
		return err
	}
	return nil
}

// attach loads the rules into the sandbox's network namespace and connects pasta to it.
func (n *egressRun) attach(ctx context.Context, pid, child int) error {
	netns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return fmt.Errorf("sandbox: the network: %w", err)
	}
	defer netns.Close()
	pidns, err := os.Open(fmt.Sprintf("/proc/%d/ns/pid", pid))
	if err != nil {
		return fmt.Errorf("sandbox: the network: %w", err)
	}
	defer pidns.Close()
	if err := pidfdSignal(child, 0); err != nil { // the namespace opened is the sandbox's own
		return fmt.Errorf("sandbox: the network: the sandbox is gone: %w", err)
	}
	owner, err := nsOwner(netns)
	if err != nil {
		return err
	}
	defer owner.Close()
	rules := egressRules(append(hostAddrs(), n.e.deny...))
	nft := exec.CommandContext(ctx, n.e.nsenter, "--net=/proc/self/fd/3", "--", n.e.nft, "-f", "-")
	nft.ExtraFiles = []*os.File{netns}
	nft.Stdin = strings.NewReader(rules)
	if out, err := nft.CombinedOutput(); err != nil {
		return fmt.Errorf("sandbox: the network: nft could not load the egress rules: %v: %s", err, clip(out))
	}
	return n.startPasta(ctx, owner, netns, pidns)
}

// startPasta runs pasta on the namespaces and returns once it has set the sandbox's interface
// up, or with its error when it failed or ctx ended first.
func (n *egressRun) startPasta(ctx context.Context, owner, netns, pidns *os.File) error {
	var err error
	if n.dir, err = pastaDir(); err != nil {
		return fmt.Errorf("sandbox: the network: %w", err)
	}
	fifo := filepath.Join(n.dir, "pid")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		return fmt.Errorf("sandbox: the network: %w", err)
	}
	// Read and write: pasta's open never blocks, and the read ends only with pasta's PID.
	ready, err := os.OpenFile(fifo, os.O_RDWR|syscall.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("sandbox: the network: %w", err)
	}
	defer ready.Close()
	// nsenter forks pasta into the PID namespace and waits for it.
	pasta := exec.Command(n.e.nsenter, "--pid=/proc/self/fd/5", "--", n.e.pasta, "--runas", "0", "--quiet",
		"--foreground", "--config-net", "--no-map-gw", "-t", "none", "-u", "none", "-T", "none", "-U", "none",
		"--dns-forward", egressDNS, "--userns", "/proc/self/fd/3", "--netns", "/proc/self/fd/4", "--pid", fifo)
	pasta.ExtraFiles = []*os.File{owner, netns, pidns}
	pasta.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	stderr := &capWriter{max: 4 << 10}
	pasta.Stderr = stderr
	if err := pasta.Start(); err != nil {
		return fmt.Errorf("sandbox: the network: pasta cannot start: %w", err)
	}
	n.pastaDone = make(chan struct{})
	go func() {
		defer close(n.pastaDone)
		_ = pasta.Wait()
	}()
	pid := make(chan error, 1)
	go func() {
		buf := make([]byte, 32)
		k, err := ready.Read(buf)
		if err == nil && k > 0 && buf[k-1] == '\n' {
			_, err = strconv.Atoi(string(buf[:k-1]))
		} else if err == nil {
			err = errors.New("a short PID")
		}
		pid <- err
	}()
	select {
	case err := <-pid:
		if err != nil {
			return fmt.Errorf("sandbox: the network: pasta's PID file: %w", err)
		}
		// pasta is done with the FIFO: remove it now, so that not even a server killed while
		// the command runs leaves it behind.
		_ = os.RemoveAll(n.dir)
		n.dir = ""
		return nil
	case <-n.pastaDone:
		return fmt.Errorf("sandbox: the network: pasta failed: %v: %s", pasta.ProcessState, clip(stderr.buf))
	case <-ctx.Done():
		return fmt.Errorf("sandbox: the network: pasta did not set the interface up in %v", egressSetupTimeout)
	}
}

// pastaRunDir holds the directory of each pasta FIFO while its command's network is set up. It
// is a fixed, neutral path: pasta's command line (--pid), which the command can read in its PID
// namespace, shows it, and a path under the server's TMPDIR would tell the command about the
// host. Made 0700 (root's: the server runs as root for the network).
const pastaRunDir = "/run/dshd-pasta"

// pastaStale is the age past which a directory in pastaRunDir is a dead server's: a live setup
// removes its own within egressSetupTimeout.
const pastaStale = 3 * egressSetupTimeout

// pastaDir makes a fresh directory of random name in pastaRunDir, which it makes first (0700)
// when there is none; it refuses a pastaRunDir that is not a directory (a symbolic link).
func pastaDir() (string, error) {
	if err := os.Mkdir(pastaRunDir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	fi, err := os.Lstat(pastaRunDir)
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s is not a directory", pastaRunDir)
	}
	return os.MkdirTemp(pastaRunDir, "")
}

// sweepPastaDirs removes the FIFO directories a server that died during a setup left in
// pastaRunDir: those older than pastaStale (a live server's are younger: it removes each once
// pasta has written its PID, within egressSetupTimeout). Several servers, and several test
// processes, may share pastaRunDir: none removes another's live directory.
func sweepPastaDirs() {
	entries, err := os.ReadDir(pastaRunDir)
	if err != nil {
		return
	}
	for _, d := range entries {
		fi, err := d.Info()
		if err == nil && time.Since(fi.ModTime()) > pastaStale {
			_ = os.RemoveAll(filepath.Join(pastaRunDir, d.Name()))
		}
	}
}

// finish ends the network once bwrap has exited: it ends the sandbox's PID namespace (bwrap's
// exit already did, unless it was killed) and waits for pasta to exit with it, and closes every
// file. It returns the setup's error.
func (n *egressRun) finish() error {
	n.closeFiles()
	if n.child >= 0 {
		// The sandbox's init: its death ends its PID namespace, pasta with it.
		_ = pidfdSignal(n.child, syscall.SIGKILL)
		_ = syscall.Close(n.child)
		n.child = -1
	}
	if n.pastaDone != nil {
		<-n.pastaDone
	}
	if n.dir != "" {
		_ = os.RemoveAll(n.dir)
	}
	return n.err
}

// closeFiles closes bwrap's ends of the pipes (once bwrap has them, or when it did not start).
func (n *egressRun) closeFiles() {
	for _, f := range n.files {
		_ = f.Close()
	}
	n.files = nil
}

// nsOwner returns the user namespace that owns the network namespace ns (ioctl NS_GET_USERNS):
// bubblewrap's sandbox runs in a user namespace nested below it, which cannot act on it.
func nsOwner(ns *os.File) (*os.File, error) {
	const nsGetUserns = 0xb701 // _IO(0xb7, 0x1), linux/nsfs.h
	fd, _, errno := syscall.Syscall(syscall.SYS_IOCTL, ns.Fd(), nsGetUserns, 0)
	if errno != 0 {
		return nil, fmt.Errorf("sandbox: the network: the owner of the sandbox's network namespace: %w", errno)
	}
	syscall.CloseOnExec(int(fd))
	return os.NewFile(fd, "userns"), nil
}

// The pidfd system calls have the same numbers on every Linux architecture (they came after
// the tables were unified); pidfds are close-on-exec.
const (
	sysPidfdSendSignal = 424
	sysPidfdOpen       = 434
)

func pidfdOpen(pid int) (int, error) {
	fd, _, errno := syscall.Syscall(sysPidfdOpen, uintptr(pid), 0, 0)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

func pidfdSignal(fd int, sig syscall.Signal) error {
	if _, _, errno := syscall.Syscall6(sysPidfdSendSignal, uintptr(fd), uintptr(sig), 0, 0, 0, 0); errno != 0 {
		return errno
	}
	return nil
}

// clip keeps at most 512 bytes of a tool's message.
func clip(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > 512 {
		b = append(b[:512:512], "…"...)
	}
	return string(b)
}

// ProbeNetwork runs `true` with Spec.Network in an empty workspace, to learn at startup whether
// the egress network works here (the tools are there, /dev/net/tun and nftables work in a user
// namespace): nil when it does, the error a command with the network would get otherwise.
func (b *Bwrap) ProbeNetwork(ctx context.Context) error {
	if err := b.NetworkErr(); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "dshd-netprobe-")
	if err != nil {
		return fmt.Errorf("sandbox: the network probe: %w", err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil { // the sandbox's user binds it
		return fmt.Errorf("sandbox: the network probe: %w", err)
	}
	res, err := b.Run(ctx, Spec{Workspace: dir, Network: true, Timeout: time.Minute,
		Command: "test $(grep -c : /proc/net/dev) -gt 1"})
	switch {
	case err != nil:
		return err
	case res.ExitCode != 0:
		return fmt.Errorf("sandbox: the network probe: the sandbox has no interface but its loopback (exit %d: %s)",
			res.ExitCode, clip([]byte(res.Stderr)))
	}
	return nil
}
