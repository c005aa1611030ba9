package pgtest

import (
	"context"
	"encoding/binary"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/pgcluster"
	"github.com/dshd/dshd/migrations"
)

// Cluster is a PostgreSQL cluster of one test's own, with one migrated database: the test may
// stop and start it (a database outage) without disturbing the other tests of the process, which
// share the process's cluster. It takes a few seconds to set up (initdb); it is stopped and
// removed when the test ends.
type Cluster struct {
	c   *pgcluster.Cluster
	url string

	mu   sync.Mutex
	stop chan struct{} // closed to release the thread that started the running server
	done chan struct{} // closed when that thread has stopped the server
}

// NewCluster initializes and starts a cluster of the test's own and migrates its database.
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	parent, err := os.MkdirTemp("", "dshd-pgtest-own-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(parent) })
	if err := os.Chmod(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	pc, err := pgcluster.New(filepath.Join(parent, "data"))
	if err != nil {
		t.Fatal(err)
	}
	pc.Settings = map[string]string{"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
		"max_connections": "200", "shared_buffers": "32MB"}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := pc.Init(ctx); err != nil {
		t.Fatal(err)
	}
	c := &Cluster{c: pc}
	c.Start(t)
	t.Cleanup(c.halt)
	admin := &server{admin: pc.URL("postgres")}
	if err := admin.exec(ctx, "CREATE DATABASE dshd"); err != nil {
		t.Fatal(err)
	}
	c.url = pc.URL("dshd")
	if _, err := migrations.Up(ctx, c.url); err != nil {
		t.Fatal(err)
	}
	return c
}

// URL is the connection URL of the cluster's migrated database.
func (c *Cluster) URL() string { return c.url }

// Start starts the server (again, on the same port) and waits until it accepts connections.
func (c *Cluster) Start(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stop != nil {
		return
	}
	// As in startCluster: the server is started from a thread that lives until it is stopped, so
	// that the parent-death signal (which follows the starting thread) fires only if this
	// process dies.
	started := make(chan error, 1)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := c.c.Start(ctx)
		cancel()
		started <- err
		if err != nil {
			return
		}
		<-stop
		_ = c.c.Stop()
	}()
	if err := <-started; err != nil {
		<-done
		t.Fatal(err)
	}
	c.stop, c.done = stop, done
}

// Stop stops the server (a fast shutdown: every session is terminated with 57P01, new
// connections are refused) and waits until it has exited.
func (c *Cluster) Stop(t testing.TB) {
	t.Helper()
	c.halt()
}

func (c *Cluster) halt() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stop == nil {
		return
	}
	close(c.stop)
	<-c.done
	c.stop, c.done = nil, nil
}

// Proxy is a TCP proxy in front of a PostgreSQL server, for tests of what a client sees when the
// network fails: Down cuts every connection and refuses new ones until Up, and LoseNextReply
// makes the next statement run (and commit) while its reply is lost.
type Proxy struct {
	target string // host:port of the server
	addr   string // host:port the proxy listens on
	url    string

	mu     sync.Mutex
	ln     net.Listener // nil while down
	conns  map[*proxyConn]struct{}
	lose   chan struct{} // armed by LoseReply: closed when a reply was lost
	loseIn int           // statements until the one whose reply is lost
}

type proxyConn struct {
	client, server net.Conn
	once           sync.Once
}

func (pc *proxyConn) close() {
	pc.once.Do(func() { pc.client.Close(); pc.server.Close() })
}

// NewProxy starts a proxy in front of the server of dbURL; URL is the same database through the
// proxy. The connections must not use TLS (sslmode=disable). It is stopped when the test ends.
func NewProxy(t testing.TB, dbURL string) *Proxy {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{target: u.Host, addr: ln.Addr().String(), conns: map[*proxyConn]struct{}{}}
	u.Host = p.addr
	p.url = u.String()
	p.serve(ln)
	t.Cleanup(p.Down)
	return p
}

// URL is the proxied database's connection URL.
func (p *Proxy) URL() string { return p.url }

// Down closes every proxied connection (their clients see the connection end mid-statement) and
// stops listening: new connections are refused until Up.
func (p *Proxy) Down() {
	p.mu.Lock()
	ln, conns := p.ln, p.conns
	p.ln, p.conns = nil, map[*proxyConn]struct{}{}
	p.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	for pc := range conns {
		pc.close()
	}
}

// Up listens again, on the same address.
func (p *Proxy) Up(t testing.TB) {
	t.Helper()
	var ln net.Listener
	err := waitUntil(5*time.Second, func() error {
		var err error
		ln, err = net.Listen("tcp", p.addr)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	p.serve(ln)
}

// LoseReply arms the proxy: the n-th statement a client sends from now on (1: the next; a Query
// message, or an Execute of the extended protocol) reaches the server and runs to its end (an
// implicit transaction commits at the Sync that follows it, a COMMIT commits), but its reply is
// dropped and the connection closed once the server has answered ReadyForQuery, as when the
// network fails just after the server did its work. The channel is closed when that has
// happened.
func (p *Proxy) LoseReply(n int) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lose, p.loseIn = make(chan struct{}), n
	return p.lose
}

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.relay(c)
		}
	}()
}

// statement counts a statement a client sends; it returns the armed LoseReply channel when the
// statement's reply is the one to lose.
func (p *Proxy) statement() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lose == nil {
		return nil
	}
	if p.loseIn--; p.loseIn > 0 {
		return nil
	}
	ch := p.lose
	p.lose = nil
	return ch
}

func (p *Proxy) relay(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	pc := &proxyConn{client: client, server: server}
	p.mu.Lock()
	if p.ln == nil { // went down meanwhile
		p.mu.Unlock()
		pc.close()
		return
	}
	p.conns[pc] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, pc)
		p.mu.Unlock()
		pc.close()
	}()
	var (
		mu      sync.Mutex
		losing  chan struct{} // set once this connection's reply is to be lost
		sslSent bool
	)
	go func() {
		defer pc.close()
		in := &framer{untyped: 1}
		buf := make([]byte, 32<<10)
		for {
			n, err := client.Read(buf)
			if n > 0 {
				var lose chan struct{}
				in.feed(buf[:n], func(typ byte, code uint32) {
					switch {
					case typ == 0 && (code == 80877103 || code == 80877104): // SSLRequest, GSSENCRequest
						in.untyped++
						mu.Lock()
						sslSent = true
						mu.Unlock()
					case (typ == 'E' || typ == 'Q') && lose == nil:
						lose = p.statement()
					}
				})
				if lose != nil {
					mu.Lock()
					losing = lose
					mu.Unlock()
				}
				if _, err := server.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	out := &framer{}
	buf := make([]byte, 32<<10)
	first := true
	for {
		n, err := server.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			mu.Lock()
			lose, ssl := losing, sslSent
			mu.Unlock()
			if first && ssl {
				chunk = chunk[1:] // the one-byte answer to SSLRequest
			}
			first = false
			ready := false
			out.feed(chunk, func(typ byte, _ uint32) { ready = ready || typ == 'Z' })
			if lose != nil {
				if ready {
					pc.close()
					close(lose)
					return
				}
				continue // the reply is dropped
			}
			if _, err := client.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// framer follows the message boundaries of one direction of a PostgreSQL connection: typed
// messages (a type byte and a length), after untyped ones (a length only: the startup message).
type framer struct {
	untyped int // untyped messages still to come
	hdr     [8]byte
	hn      int // header bytes read
	remain  int // body bytes still to skip
}

// feed scans b, calling fn at each message header: its type (0 for an untyped message) and, for
// an untyped one, the protocol code that follows its length.
func (f *framer) feed(b []byte, fn func(typ byte, code uint32)) {
	for len(b) > 0 {
		if f.remain > 0 {
			k := min(f.remain, len(b))
			f.remain -= k
			b = b[k:]
			continue
		}
		size := 5
		if f.untyped > 0 {
			size = 8
		}
		k := min(size-f.hn, len(b))
		copy(f.hdr[f.hn:], b[:k])
		f.hn += k
		b = b[k:]
		if f.hn < size {
			return
		}
		f.hn = 0
		if f.untyped > 0 {
			f.untyped--
			length := int(binary.BigEndian.Uint32(f.hdr[0:4]))
			f.remain = max(length-8, 0)
			fn(0, binary.BigEndian.Uint32(f.hdr[4:8]))
			continue
		}
		length := int(binary.BigEndian.Uint32(f.hdr[1:5]))
		f.remain = max(length-4, 0)
		fn(f.hdr[0], 0)
	}
}

// waitUntil retries fn every 20 ms until it succeeds or timeout passes.
func waitUntil(timeout time.Duration, fn func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := fn()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}
