package sandbox_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/sandbox"
	"github.com/dshd/dshd/pkg/sandbox/sandboxtest"
)

// The egress tests run in a network the test makes itself (testNet), never on the machine's
// own: a "host" namespace where the test's sandboxes run (it plays the server's host: its
// interfaces, loopback and gateway are the ones the rules must refuse), with a veth to a second
// namespace that is its gateway and holds the "public" address. No packet of these tests can
// leave the two namespaces, whatever the sandbox does.
const (
	netChildEnv = "DSHD_EGRESS_TEST_PEER" // set in the re-executed test: the peer namespace's name
	hostAddr    = "10.77.0.1"             // the host's address on the veth (the sandbox gets it too)
	gatewayAddr = "10.77.0.2"             // the host's gateway, in the peer namespace
	privateAddr = "172.31.77.1"           // a private address of the host, on a second interface
	// publicHostAddr is an address of the host that netguard treats as public, and publicAddr a
	// public address in the peer namespace, behind the gateway. Both are in 192.88.99.0/24, the
	// former 6to4 relay anycast range (RFC 7526 deprecated it): public to netguard, and no
	// packet to it leaves the test's namespaces.
	publicHostAddr = "192.88.99.77"
	publicAddr     = "192.88.99.1"
	// The same in IPv6: unique local addresses on the veth, and public ones (to netguard) from
	// 3fff::/20, the documentation range of RFC 9637, which nothing routes.
	hostAddr6       = "fd77::1"
	gatewayAddr6    = "fd77::2"
	publicHostAddr6 = "3fff::77"
	publicAddr6     = "3fff::1"
)

// egressTools fails (CI) or skips the test when the egress network's tools are missing.
func egressTools(t *testing.T) {
	t.Helper()
	var missing []string
	for _, tool := range []string{"pasta", "nft", "ip", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			if _, err := os.Stat("/usr/sbin/" + tool); err != nil {
				missing = append(missing, tool)
			}
		}
	}
	if len(missing) > 0 {
		msg := fmt.Sprintf("the egress network needs %s (scripts/ensure-deps.sh installs passt, nftables, iproute2)", missing)
		if os.Getenv("CI") != "" {
			t.Fatal(msg + " (CI requires the sandbox's network)")
		}
		t.Skip("SKIP: " + msg)
	}
	if os.Geteuid() != 0 {
		t.Skip("SKIP: the egress tests make network namespaces, which needs root (the server runs as root)")
	}
}

// inTestNet runs the calling test again inside the host namespace of a network it makes (see
// above), removed when the test ends, and returns false; in that re-executed test it returns
// true and the peer namespace's name: the caller then runs its body.
func inTestNet(t *testing.T) (peer string, inside bool) {
	t.Helper()
	if p := os.Getenv(netChildEnv); p != "" {
		return p, true
	}
	egressTools(t)
	bwrapOrSkip(t)
	id := strconv.Itoa(os.Getpid()) + strconv.Itoa(int(netSeq.Add(1)))
	host, peer := "dshd-eh"+id, "dshd-ep"+id
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	for _, ns := range []string{host, peer} {
		ip("netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		ip("-n", ns, "link", "set", "lo", "up")
	}
	ip("-n", host, "link", "add", "veth0", "type", "veth", "peer", "name", "veth0", "netns", peer)
	ip("-n", host, "addr", "add", hostAddr+"/24", "dev", "veth0")
	ip("-n", host, "link", "set", "veth0", "up")
	ip("-n", host, "route", "add", "default", "via", gatewayAddr)
	ip("-n", host, "-6", "addr", "add", hostAddr6+"/64", "dev", "veth0", "nodad")
	ip("-n", host, "-6", "route", "add", "default", "via", gatewayAddr6)
	ip("-n", host, "link", "add", "veth1", "type", "veth", "peer", "name", "veth2") // a second interface
	ip("-n", host, "addr", "add", privateAddr+"/32", "dev", "veth1")
	ip("-n", host, "addr", "add", publicHostAddr+"/32", "dev", "veth1")
	ip("-n", host, "-6", "addr", "add", publicHostAddr6+"/128", "dev", "veth1", "nodad")
	ip("-n", host, "link", "set", "veth1", "up")
	ip("-n", host, "link", "set", "veth2", "up")
	ip("-n", peer, "addr", "add", gatewayAddr+"/24", "dev", "veth0")
	ip("-n", peer, "addr", "add", publicAddr+"/32", "dev", "lo")
	ip("-n", peer, "-6", "addr", "add", gatewayAddr6+"/64", "dev", "veth0", "nodad")
	ip("-n", peer, "-6", "addr", "add", publicAddr6+"/128", "dev", "lo", "nodad")
	ip("-n", peer, "link", "set", "veth0", "up")

	// The host's resolver is in the peer namespace, on the public address (ip netns exec mounts
	// /etc/netns/<name>/resolv.conf over /etc/resolv.conf): pasta forwards the sandbox's DNS
	// queries to it.
	etc := filepath.Join("/etc/netns", host)
	if err := os.MkdirAll(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(etc); _ = os.Remove("/etc/netns") }) // the latter only when empty
	if err := os.WriteFile(filepath.Join(etc, "resolv.conf"), []byte("nameserver "+publicAddr+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command("ip", "netns", "exec", host, os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), netChildEnv+"="+peer)
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: "+t.Name())) {
		t.Fatalf("in the test's network: %v\n%s", err, out)
	}
	t.Logf("in the test's network:\n%s", out)
	return "", false
}

var netSeq atomic.Int32

// listener accepts connections on addr (in the namespace peer when it is not ""), writes its
// name to each, and counts them.
type listener struct {
	name    string
	ln      net.Listener
	accepts atomic.Int32
	wg      sync.WaitGroup
}

func listen(t *testing.T, peer, network, addr, name string) *listener {
	t.Helper()
	l := &listener{name: name}
	var err error
	if peer == "" {
		l.ln, err = net.Listen(network, addr)
	} else {
		l.ln, err = listenIn(peer, network, addr)
	}
	if err != nil {
		t.Fatalf("listen %s %s: %v", name, addr, err)
	}
	t.Cleanup(func() { l.close() })
	l.wg.Go(func() {
		for {
			c, err := l.ln.Accept()
			if err != nil {
				return
			}
			l.accepts.Add(1)
			_, _ = c.Write([]byte("reached-" + name + "\n"))
			_ = c.Close()
		}
	})
	return l
}

func (l *listener) close() { _ = l.ln.Close(); l.wg.Wait() }

// listenPacket opens a UDP socket on addr (in the namespace peer when it is not "") and counts
// the datagrams that reach it; when answer is set, it answers each with answer(datagram).
type packetListener struct {
	name     string
	pc       net.PacketConn
	received atomic.Int32
	wg       sync.WaitGroup
}

func listenPacket(t *testing.T, peer, addr, name string, answer func([]byte) []byte) *packetListener {
	t.Helper()
	l := &packetListener{name: name}
	var err error
	if peer == "" {
		l.pc, err = net.ListenPacket("udp4", addr)
	} else {
		err = inNetns(peer, func() (err error) { l.pc, err = net.ListenPacket("udp4", addr); return err })
	}
	if err != nil {
		t.Fatalf("listen %s %s: %v", name, addr, err)
	}
	t.Cleanup(func() { l.close() })
	l.wg.Go(func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := l.pc.ReadFrom(buf)
			if err != nil {
				return
			}
			l.received.Add(1)
			if answer != nil {
				if a := answer(buf[:n]); a != nil {
					_, _ = l.pc.WriteTo(a, from)
				}
			}
		}
	})
	return l
}

func (l *packetListener) close() { _ = l.pc.Close(); l.wg.Wait() }

func (l *packetListener) port() int { return l.pc.LocalAddr().(*net.UDPAddr).Port }

// answerA answers a DNS query for any name with one A record, publicAddr; nil for what is not a
// query of class IN and type A (the resolver then gets no answer for it).
func answerA(q []byte) []byte {
	if len(q) < 12 || q[2]&0x80 != 0 || q[4] != 0 || q[5] != 1 {
		return nil
	}
	i := 12
	for i < len(q) && q[i] != 0 {
		i += int(q[i]) + 1
	}
	if i+5 > len(q) || q[i+1] != 0 || q[i+2] != 1 || q[i+3] != 0 || q[i+4] != 1 {
		return nil
	}
	a := append([]byte{q[0], q[1], 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0}, q[12:i+5]...)
	ip := net.ParseIP(publicAddr).To4()
	return append(a, 0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, ip[0], ip[1], ip[2], ip[3])
}

// inNetns runs fn on a thread of its own in the named network namespace (see listenIn).
func inNetns(ns string, fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		f, err := os.Open(filepath.Join("/run/netns", ns))
		if err != nil {
			ch <- err
			return
		}
		defer f.Close()
		if err := setns(f); err != nil {
			ch <- err
			return
		}
		ch <- fn()
	}()
	return <-ch
}

// listenIn opens a listener in the named network namespace (the socket stays in the namespace
// it was made in).
func listenIn(ns, network, addr string) (ln net.Listener, err error) {
	err = inNetns(ns, func() error { ln, err = net.Listen(network, addr); return err })
	return ln, err
}

// connect is a shell line that connects to addr:port and prints what the listener wrote, or
// "refused <addr>" when the connection fails: at most 20 s each (a refusal is immediate).
func connect(addr string, port int) string {
	host := addr
	if strings.Contains(addr, ":") {
		host = "[" + addr + "]"
	}
	return fmt.Sprintf(`timeout 20 bash -c 'exec 3<>/dev/tcp/%s/%d && read -r l <&3 && echo "$l"' 2>/dev/null || echo "refused %s:%d"; `,
		addr, port, host, port)
}

func port(l *listener) int { return l.ln.Addr().(*net.TCPAddr).Port }

// TestEgressReachesOnlyPublicAddresses: with Spec.Network a command reaches a public address,
// IPv4 and IPv6 (so "no network at all" does not pass), and none of the host's own: not its
// loopback (127.0.0.1, ::1), not an address of its interfaces (private or public), not its
// gateway, nor the host's loopback through the gateway's addresses (pasta maps the gateway to the host unless
// --no-map-gw). Before the egress network the same command shared the host's network namespace
// and reached every one of them (issue 17, "network egress without the host's network").
func TestEgressReachesOnlyPublicAddresses(t *testing.T) {
	peer, inside := inTestNet(t)
	if !inside {
		return
	}
	b := bwrapOrSkip(t)
	ws := open(t, workspaces(t, ownerOf(b)), "egress")
	public := []*listener{
		listen(t, peer, "tcp4", publicAddr+":0", "public"),
		listen(t, peer, "tcp6", "["+publicAddr6+"]:0", "public6"),
	}
	refused := []*listener{
		listen(t, "", "tcp4", "127.0.0.1:0", "host-loopback"),
		listen(t, "", "tcp6", "[::1]:0", "host-loopback6"),
		listen(t, "", "tcp4", hostAddr+":0", "host-veth"),
		listen(t, "", "tcp6", "["+hostAddr6+"]:0", "host-veth6"),
		listen(t, "", "tcp4", privateAddr+":0", "host-private"),
		listen(t, "", "tcp4", publicHostAddr+":0", "host-public"),
		listen(t, "", "tcp6", "["+publicHostAddr6+"]:0", "host-public6"),
		listen(t, peer, "tcp4", gatewayAddr+":0", "gateway"),
		listen(t, peer, "tcp6", "["+gatewayAddr6+"]:0", "gateway6"),
	}
	addrs := []string{"127.0.0.1", "::1", hostAddr, hostAddr6, privateAddr, publicHostAddr, publicHostAddr6,
		gatewayAddr, gatewayAddr6}
	var cmd strings.Builder
	cmd.WriteString(connect(publicAddr, port(public[0])) + connect(publicAddr6, port(public[1])))
	for i, l := range refused {
		cmd.WriteString(connect(addrs[i], port(l)))
	}
	// The host's loopback through the gateway's addresses.
	cmd.WriteString(connect(gatewayAddr, port(refused[0])) + connect(gatewayAddr6, port(refused[1])))
	res := runOK(t, b, sandbox.Spec{Workspace: ws.Dir, Network: true, Command: cmd.String()})
	if !strings.Contains(res.Stdout, "reached-public\n") || !strings.Contains(res.Stdout, "reached-public6\n") {
		t.Errorf("a public listener was not reached: %+v", res)
	}
	if strings.Count(res.Stdout, "reached-") != 2 || strings.Count(res.Stdout, "refused ") != len(refused)+2 {
		t.Errorf("a host listener was reached, or a connection neither reached nor refused: %+v", res)
	}
	for _, l := range public {
		l.close()
		// At least one: pasta may open a second host connection for a retransmitted SYN (seen
		// with IPv6, when the first one waits for neighbour discovery).
		if n := l.accepts.Load(); n == 0 {
			t.Errorf("%s accepted no connection", l.name)
		}
	}
	for _, l := range refused {
		l.close()
		if n := l.accepts.Load(); n != 0 {
			t.Errorf("%s accepted %d connections from the sandbox", l.name, n)
		}
	}
}

// TestEgressRulesCannotBeChangedByTheCommand: the command can neither kill pasta (in its PID
// namespace, another user's), nor flush the egress rules, nor add a rule, nor change its routes
// or addresses (EPERM: it has no capability in the user namespace that owns its network
// namespace), and after trying the host is still out of reach and the public address reached.
func TestEgressRulesCannotBeChangedByTheCommand(t *testing.T) {
	peer, inside := inTestNet(t)
	if !inside {
		return
	}
	b := bwrapOrSkip(t)
	ws := open(t, workspaces(t, ownerOf(b)), "rules")
	private := listen(t, "", "tcp4", privateAddr+":0", "host-private")
	gateway := listen(t, peer, "tcp4", gatewayAddr+":0", "gateway")
	public := listen(t, peer, "tcp4", publicAddr+":0", "public")
	// pasta is in the sandbox's PID namespace: the command sees it but cannot kill it.
	killPasta := `for d in /proc/[0-9]*; do case "$(tr '\0' ' ' < $d/cmdline 2>/dev/null)" in ` +
		`*/pasta" "*) kill -9 ${d#/proc/}; echo pasta-kill=$?;; esac; done; ` // argv[0], not this script
	cmd := killPasta + "/usr/sbin/nft flush ruleset; echo nft-flush=$?; " +
		"/usr/sbin/nft add table inet mine; echo nft-add=$?; " +
		"ip route del default; echo route-del=$?; " +
		"ip route add " + privateAddr + "/32 dev lo; echo route-add=$?; " +
		"ip addr add " + gatewayAddr + "/32 dev lo; echo addr-add=$?; " +
		connect(privateAddr, port(private)) + connect(gatewayAddr, port(gateway)) + connect(publicAddr, port(public))
	res := runOK(t, b, sandbox.Spec{Workspace: ws.Dir, Network: true, Command: cmd})
	if !strings.Contains(res.Stdout, "pasta-kill=1\n") || strings.Contains(res.Stdout, "pasta-kill=0") ||
		!strings.Contains(res.Stdout, "reached-public\n") {
		t.Errorf("the command found no pasta, killed it, or lost the network: %+v", res)
	}
	for _, step := range []string{"nft-flush", "nft-add", "route-del", "route-add", "addr-add"} {
		if !strings.Contains(res.Stdout, step+"=") || strings.Contains(res.Stdout, step+"=0") {
			t.Errorf("%s succeeded or did not run: %+v", step, res)
		}
	}
	if strings.Count(res.Stderr, "Operation not permitted") < 5 {
		t.Errorf("want EPERM for every change: %+v", res)
	}
	if strings.Count(res.Stdout, "reached-") != 1 || strings.Count(res.Stdout, "refused ") != 2 {
		t.Errorf("the host was reached after the command tried to change its network: %+v", res)
	}
}

// TestEgressPastaEndsWithTheCommand: when Run returns, the command's pasta has exited (no pasta
// process is left in the test's host namespace), after a command that ended by itself and after
// one killed at its timeout. pasta does not quit by itself when the sandbox ends (it holds the
// namespace), so without the kill every networked command would leave one behind.
func TestEgressPastaEndsWithTheCommand(t *testing.T) {
	if _, inside := inTestNet(t); !inside {
		return
	}
	b := bwrapOrSkip(t)
	ws := open(t, workspaces(t, ownerOf(b)), "pasta")
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	for _, spec := range []sandbox.Spec{
		{Workspace: ws.Dir, Network: true, Command: "true"},
		{Workspace: ws.Dir, Network: true, Command: "sleep 600", Timeout: 2 * time.Second},
	} {
		res := runOK(t, b, spec)
		if n := pastas(t, self); n != 0 {
			t.Errorf("%d pasta processes outlived %q (%+v)", n, spec.Command, res)
		}
	}
}

// pastas counts the live pasta processes in the network namespace ns.
func pastas(t *testing.T, ns string) int {
	t.Helper()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range dirs {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		// pasta runs as passt or passt.avx2 (its comm), called as pasta (its argv[0]).
		cmdline, _ := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if argv0, _, _ := strings.Cut(string(cmdline), "\x00"); filepath.Base(argv0) != "pasta" {
			continue
		}
		if l, err := os.Readlink(filepath.Join("/proc", d.Name(), "ns/net")); err == nil && l == ns {
			n++
		}
	}
	return n
}

// TestEgressSetupFailureStopsTheCommand: when the egress network cannot be set up (pasta or nft
// fails) Run returns an error that names the failing step, and the command never ran (it would
// have run without its rules, or without its network), and so does ProbeNetwork, the server's
// startup check; when a tool is missing, NetworkErr says so, a command with the network fails
// with that error, and one without it runs.
func TestEgressSetupFailureStopsTheCommand(t *testing.T) {
	t.Parallel()
	egressTools(t)
	bwrapOrSkip(t)
	for _, c := range []struct {
		name string
		cfg  sandbox.BwrapConfig
		want string
	}{
		{"pasta fails", sandbox.BwrapConfig{PastaPath: "/bin/false"}, "pasta failed"},
		{"nft fails", sandbox.BwrapConfig{NftPath: "/bin/false"}, "nft could not load the egress rules"},
	} {
		b, err := sandbox.NewBwrap(c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		ws := open(t, workspaces(t, ownerOf(b)), "fail")
		_, err = b.Run(t.Context(), sandbox.Spec{Workspace: ws.Dir, Network: true, Command: "echo ran > ran", Timeout: time.Minute})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
		if _, serr := os.Stat(filepath.Join(ws.Dir, "ran")); serr == nil {
			t.Errorf("%s: the command ran", c.name)
		}
		if err := b.ProbeNetwork(t.Context()); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: the startup probe: %v", c.name, err)
		}
	}
	if err := bwrapOrSkip(t).ProbeNetwork(t.Context()); err != nil {
		t.Errorf("the startup probe with the tools: %v", err)
	}
	b, err := sandbox.NewBwrap(sandbox.BwrapConfig{PastaPath: "/nonexistent/pasta"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.NetworkErr(); err == nil || !strings.Contains(err.Error(), "pasta (package passt)") {
		t.Fatalf("NetworkErr: %v", err)
	}
	ws := open(t, workspaces(t, ownerOf(b)), "missing")
	if _, err := b.Run(t.Context(), sandbox.Spec{Workspace: ws.Dir, Network: true, Command: "true"}); err == nil ||
		!strings.Contains(err.Error(), "pasta (package passt)") {
		t.Errorf("with the network: %v", err)
	}
	if res := runOK(t, b, sandbox.Spec{Workspace: ws.Dir, Command: "echo fine"}); res.Stdout != "fine\n" {
		t.Errorf("without the network: %+v", res)
	}
}

// setns moves the calling thread into the network namespace of f.
func setns(f *os.File) error {
	if _, _, errno := syscall.RawSyscall(sysSetns, f.Fd(), syscall.CLONE_NEWNET, 0); errno != 0 {
		return errno
	}
	return nil
}

// TestEgressResolvesNamesAndRefusesUDPToTheHost: with Spec.Network a command resolves a name
// through the host's resolver (pasta forwards the queries sent to the sandbox's nameserver), and
// its UDP datagrams to the host's loopback, an address of its interfaces or its gateway never
// arrive, while one to a public address does (the control).
func TestEgressResolvesNamesAndRefusesUDPToTheHost(t *testing.T) {
	peer, inside := inTestNet(t)
	if !inside {
		return
	}
	b := bwrapOrSkip(t)
	ws := open(t, workspaces(t, ownerOf(b)), "dns")
	dns := listenPacket(t, peer, publicAddr+":53", "resolver", answerA)
	public := listenPacket(t, peer, publicAddr+":0", "public", func([]byte) []byte { return []byte("pong") })
	refused := []*packetListener{
		listenPacket(t, "", "127.0.0.1:0", "host-loopback", nil),
		listenPacket(t, "", privateAddr+":0", "host-private", nil),
		listenPacket(t, "", publicHostAddr+":0", "host-public", nil),
		listenPacket(t, peer, gatewayAddr+":0", "gateway", nil),
	}
	addrs := []string{"127.0.0.1", privateAddr, publicHostAddr, gatewayAddr}
	var cmd strings.Builder
	for i, l := range refused {
		fmt.Fprintf(&cmd, "echo ping > /dev/udp/%s/%d; ", addrs[i], l.port())
	}
	// The control waits for the answer, so the public datagram has arrived when Run returns.
	fmt.Fprintf(&cmd, "exec 3<>/dev/udp/%s/%d && echo ping >&3 && timeout 20 head -c 4 <&3 && echo; ", publicAddr, public.port())
	cmd.WriteString("getent ahostsv4 egress.test | head -n 1")
	res := runOK(t, b, sandbox.Spec{Workspace: ws.Dir, Network: true, Command: cmd.String()})
	if !strings.Contains(res.Stdout, "pong\n") || !strings.Contains(res.Stdout, publicAddr+" ") {
		t.Errorf("no answer from the public address, or the name did not resolve to it: %+v", res)
	}
	if dns.received.Load() == 0 {
		t.Errorf("the resolver got no query: %+v", res)
	}
	for _, l := range refused {
		l.close()
		if n := l.received.Load(); n != 0 {
			t.Errorf("%s received %d datagrams from the sandbox", l.name, n)
		}
	}
}

// BenchmarkBwrapRunNetwork measures what the egress network adds to a command: `true` without
// the network, then with it (rules, pasta, and pasta's end). It runs in the machine's network
// namespace and sends nothing.
func BenchmarkBwrapRunNetwork(b *testing.B) {
	bw := sandboxtest.Bwrap(b)
	sandboxtest.Network(b, bw)
	w, err := sandbox.NewWorkspaces(sandbox.WorkspacesConfig{Root: sandboxtest.WorkspaceRoot(b), Owner: ownerOf(bw)})
	if err != nil {
		b.Fatal(err)
	}
	ws, err := w.Open("bench")
	if err != nil {
		b.Fatal(err)
	}
	defer ws.Close()
	for _, network := range []bool{false, true} {
		b.Run(fmt.Sprintf("network=%v", network), func(b *testing.B) {
			for b.Loop() {
				if _, err := bw.Run(b.Context(), sandbox.Spec{Workspace: ws.Dir, Network: network, Command: "true"}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// serverEnv marks the re-executed test of TestEgressPastaDiesWithTheServer that plays the
// server: it runs one networked command and never returns, until it is killed.
const serverEnv = "DSHD_EGRESS_TEST_SERVER"

// TestEgressPastaDiesWithTheServer: when the server dies (SIGKILL) while a command with the
// network runs, its pasta does not outlive it: the command dies with bubblewrap, and pasta, in
// the sandbox's PID namespace, with the namespace. pasta would not quit by itself, and a
// parent-death signal does not survive its change of credentials.
func TestEgressPastaDiesWithTheServer(t *testing.T) {
	if _, inside := inTestNet(t); !inside {
		return
	}
	if os.Getenv(serverEnv) != "" {
		playServer(t)
		return
	}
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	server := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1")
	server.Env = append(os.Environ(), serverEnv+"=1")
	out, err := server.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	server.Stderr = os.Stderr
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "command-started\n" {
		_ = server.Process.Kill()
		_ = server.Wait()
		t.Fatalf("the server did not start its command: %q %v", line, err)
	}
	if n := pastas(t, self); n != 1 {
		t.Errorf("%d pasta processes while the command runs, want 1", n)
	}
	_ = server.Process.Kill()
	_ = server.Wait()
	// The kernel ends the sandbox and its namespace after the server's death, asynchronously:
	// wait for it, with a generous bound (it takes milliseconds).
	deadline := time.Now().Add(30 * time.Second)
	for pastas(t, self) != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := pastas(t, self); n != 0 {
		t.Fatalf("%d pasta processes outlived the server by 30 s", n)
	}
}

// playServer runs a command with the network that tells, through a FIFO in its workspace, that
// it runs, prints command-started and waits to be killed.
func playServer(t *testing.T) {
	b := bwrapOrSkip(t)
	ws := open(t, workspaces(t, ownerOf(b)), "server")
	fifo := filepath.Join(ws.Dir, "up")
	if err := syscall.Mkfifo(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	go func() {
		_, _ = b.Run(context.Background(), sandbox.Spec{Workspace: ws.Dir, Network: true,
			Command: "echo up > up; exec sleep 600", Timeout: 10 * time.Minute})
	}()
	f, err := os.Open(fifo) // blocks until the command opens it
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(f)
	fmt.Println("command-started")
	select {}
}
