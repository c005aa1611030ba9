// Package pgcluster runs a PostgreSQL cluster from the installed server binaries, without Docker:
// `make run` keeps one under ./.data, and internal/pgtest starts a throwaway one per test process.
//
// initdb and postgres refuse to run as root, so when the caller is root the cluster directory is
// owned by the `postgres` user and the binaries run with that user's credentials.
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrNoBinaries reports that no PostgreSQL server binaries were found.
var ErrNoBinaries = errors.New("pgcluster: PostgreSQL server binaries not found (install Debian's postgresql package)")

// BinDir finds the directory holding initdb and postgres: $PG_BINDIR, then `pg_config --bindir`,
// then the newest /usr/lib/postgresql/<version>/bin, then $PATH.
func BinDir() (string, error) {
	if d := os.Getenv("PG_BINDIR"); d != "" {
		return d, nil
	}
	var candidates []string
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		candidates = append(candidates, strings.TrimSpace(string(out)))
	}
	versions, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(versions, func(i, j int) bool { return pgVersion(versions[i]) > pgVersion(versions[j]) })
	candidates = append(candidates, versions...)
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			candidates = append(candidates, filepath.Dir(real))
		}
	}
	for _, d := range candidates {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", ErrNoBinaries
}

func pgVersion(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// Cluster is one PostgreSQL data directory and the server that runs it.
type Cluster struct {
	BinDir string
	Dir    string // data directory; the unix socket lives here too
	Port   int
	// Settings are extra `-c name=value` server settings.
	Settings map[string]string

	cred *syscall.Credential
	cmd  *exec.Cmd
	done chan struct{}
}

// New returns a cluster description for dir. It resolves the binaries and, when running as root,
// the postgres user's credentials. It starts nothing.
func New(dir string) (*Cluster, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	c := &Cluster{BinDir: bin, Dir: abs}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("pgcluster: running as root needs the postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	return c, nil
}

// Initialized reports whether the data directory already holds a cluster.
func (c *Cluster) Initialized() bool {
	_, err := os.Stat(filepath.Join(c.Dir, "PG_VERSION"))
	return err == nil
}

// Init runs initdb (trust authentication, UTF-8, C locale, no fsync) on an empty directory.
func (c *Cluster) Init(ctx context.Context) error {
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return err
	}
	if err := c.chown(c.Dir); err != nil {
		return err
	}
	out, err := c.command(ctx, "initdb", "-D", c.Dir, "-U", "postgres", "--auth=trust",
		"-E", "UTF8", "--locale=C", "--no-sync").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgcluster: initdb: %w: %s", err, out)
	}
	return nil
}

// Start runs the server in the foreground of a child process tied to this process: it is killed
// if this process dies. Port 0 picks a free port. Start waits until the server accepts
// connections.
func (c *Cluster) Start(ctx context.Context) error {
	if c.Port == 0 {
		p, err := FreePort()
		if err != nil {
			return err
		}
		c.Port = p
	}
	args := []string{"-D", c.Dir, "-p", strconv.Itoa(c.Port), "-k", c.Dir,
		"-c", "listen_addresses=127.0.0.1"}
	for k, v := range c.Settings {
		args = append(args, "-c", k+"="+v)
	}
	c.cmd = c.command(context.Background(), "postgres", args...)
	c.cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	logf, err := os.OpenFile(filepath.Join(c.Dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	if err := c.cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("pgcluster: start postgres: %w", err)
	}
	c.done = make(chan struct{})
	go func() { _ = c.cmd.Wait(); logf.Close(); close(c.done) }()
	return c.waitReady(ctx)
}

// StartDetached starts the server with pg_ctl so that it outlives this process (for `make run`).
// It does nothing if the server of this directory is already running.
func (c *Cluster) StartDetached(ctx context.Context) error {
	if c.Port == 0 {
		c.Port = 5432
	}
	if c.running(ctx) {
		return nil
	}
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1", c.Port, c.Dir)
	out, err := c.command(ctx, "pg_ctl", "-D", c.Dir, "-l", filepath.Join(c.Dir, "server.log"),
		"-o", opts, "-w", "start").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgcluster: pg_ctl start: %w: %s", err, out)
	}
	return c.waitReady(ctx)
}

func (c *Cluster) running(ctx context.Context) bool {
	return c.command(ctx, "pg_ctl", "-D", c.Dir, "status").Run() == nil
}

// Stop stops a server started by Start (fast shutdown) and waits for it to exit.
func (c *Cluster) Stop() error {
	if c.cmd == nil || c.cmd.Process == nil {
		return nil
	}
	_ = c.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
	return nil
}

// URL is the connection string of database db.
func (c *Cluster) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.Port, db)
}

func (c *Cluster) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", c.Port), time.Second)
		if err == nil {
			conn.Close()
			if c.command(ctx, "pg_isready", "-h", "127.0.0.1", "-p", strconv.Itoa(c.Port), "-U", "postgres").Run() == nil {
				return nil
			}
		}
		if c.done != nil {
			select {
			case <-c.done:
				log, _ := os.ReadFile(filepath.Join(c.Dir, "server.log"))
				return fmt.Errorf("pgcluster: postgres exited: %s", tail(log, 2000))
			default:
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgcluster: postgres not ready on port %d: %w", c.Port, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.BinDir, name), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	cmd.Dir = "/"
	// The server's own secrets (model API keys, tokens) are not the database's business: the
	// PostgreSQL processes get only what they need.
	cmd.Env = []string{"LC_ALL=C", "PATH=" + os.Getenv("PATH")}
	return cmd
}

func (c *Cluster) chown(dir string) error {
	if c.cred == nil {
		return nil
	}
	return os.Chown(dir, int(c.cred.Uid), int(c.cred.Gid))
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
