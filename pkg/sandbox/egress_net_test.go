package sandbox_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
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
	// deniedAddr is a second public address in the peer namespace, which the operator's deny
	// list (BwrapConfig.EgressDeny) names in TestEgressRefusesTheOperatorsDenyList.
	deniedAddr = "192.88.99.2"
	// The same in IPv6: unique local addresses on the veth, and public ones (to netguard) from
	// 3fff::/20, the documentation range of RFC 9637, which nothing routes.
	hostAddr6       = "fd77::1"
	gatewayAddr6    = "fd77::2"
	publicHostAddr6 = "3fff::77"
	publicAddr6     = "3fff::1"
	deniedAddr6     = "3fff::2"
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
	// Unique across the test processes that run at once (and leftovers of killed ones): the
	// process, this process's count, and a random part.
	id := fmt.Sprintf("%d-%d-%s", os.Getpid(), netSeq.Add(1), rand.Text()[:6])
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
	ip("-n", peer, "addr", "add", deniedAddr+"/32", "dev", "lo")
	ip("-n", peer, "-6", "addr", "add", deniedAddr6+"/128", "dev", "lo", "nodad")
	ip("-n", peer, "link", "set", "veth0", "up")

	// The host's resolver is in the peer namespace, on the public address (ip netns exec mounts
	// /etc/netns/<name>/resolv.conf over /etc/resolv.conf): pasta forwards the sandbox's DNS
	// queries to it.
	// /etc/netns is shared with every other process (other test processes make their own
	// directory in it at once): it is removed only by the process that made it, and only once
	// empty; a process that finds it removed under its feet (between its check and its mkdir)
	// makes it again.
	etc := filepath.Join("/etc/netns", host)
	_, err := os.Lstat("/etc/netns")
	madeEtc := errors.Is(err, os.ErrNotExist)
	t.Cleanup(func() {
		_ = os.RemoveAll(etc)
		if madeEtc {
			_ = os.Remove("/etc/netns") // fails, and keeps it, when another process uses it
		}
	})
	for try := 0; ; try++ {
		err = os.MkdirAll(etc, 0o755)
		if err == nil {
			err = os.WriteFile(filepath.Join(etc, "resolv.conf"), []byte("nameserver "+publicAddr+"\n"), 0o644)
		}
		if err == nil || !errors.Is(err, os.ErrNotExist) || try == 10 {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command("ip", "netns", "exec", host, os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v",
		"-test.timeout="+innerTimeout(t).String())
	cmd.Env = append(os.Environ(), netChildEnv+"="+peer)
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: "+t.Name())) {
		t.Fatalf("in the test's network: %v\n%s", err, out)
	}
	t.Logf("in the test's network:\n%s", out)
	return "", false
}

var netSeq atomic.Int32

// innerTimeout is the -test.timeout of a re-executed test: what is left of this test binary's
// own (less a margin, so that the inner one fails first, with its goroutines' stacks), or 10
// minutes without one; the inner test never outlives the outer one.
func innerTimeout(t *testing.T) time.Duration {
	d := 10 * time.Minute
	if deadline, ok := t.Deadline(); ok {
		d = time.Until(deadline) * 9 / 10
	}
	return max(d, time.Second)
}

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

// setns moves the calling thread into the network namespace of f.
func setns(f *os.File) error {
	if _, _, errno := syscall.RawSyscall(sysSetns, f.Fd(), syscall.CLONE_NEWNET, 0); errno != 0 {
		return errno
	}
	return nil
}
