// Package pgtest gives tests a real, throwaway PostgreSQL.
//
// One cluster is started per `go test` process (lazily, on first use) from the installed server
// binaries; a template database is migrated once; every test gets its own database cloned from
// the template (about 100 ms). Packages that use it call pgtest.Main from TestMain so the cluster
// is stopped and its directory removed when the tests end; the server is also killed if the test
// process dies.
//
// PGTEST_DATABASE_URL (or DATABASE_URL) points the helper at an existing server instead: the
// template and test databases are then created there.
package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dshd/dshd/internal/pgcluster"
	"github.com/dshd/dshd/migrations"
)

const templateDB = "dshd_template"

type server struct {
	admin string // URL of the maintenance database
	base  *url.URL
	stop  func()
}

var (
	once    sync.Once
	srv     *server
	srvErr  error
	counter atomic.Int64
	createM sync.Mutex
)

// Main runs the package's tests and then stops the cluster, if one was started.
func Main(m *testing.M) {
	code := m.Run()
	if srv != nil && srv.stop != nil {
		srv.stop()
	}
	os.Exit(code)
}

func start() (*server, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	u := os.Getenv("PGTEST_DATABASE_URL")
	if u == "" {
		u = os.Getenv("DATABASE_URL")
	}
	s := &server{}
	if u != "" {
		s.admin = u
	} else {
		if err := startCluster(ctx, s); err != nil {
			return nil, err
		}
	}
	base, err := url.Parse(s.admin)
	if err != nil {
		return nil, fmt.Errorf("pgtest: bad database URL: %w", err)
	}
	s.base = base
	if err := s.exec(ctx, "DROP DATABASE IF EXISTS "+templateDB); err != nil {
		return nil, err
	}
	if err := s.exec(ctx, "CREATE DATABASE "+templateDB); err != nil {
		return nil, err
	}
	if _, err := migrations.Up(ctx, s.url(templateDB)); err != nil {
		return nil, err
	}
	return s, nil
}

func startCluster(ctx context.Context, s *server) error {
	parent, err := os.MkdirTemp("", "dshd-pgtest-")
	if err != nil {
		return err
	}
	if err := os.Chmod(parent, 0o755); err != nil {
		return err
	}
	c, err := pgcluster.New(filepath.Join(parent, "data"))
	if err != nil {
		return err
	}
	c.Settings = map[string]string{
		"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
		"max_connections": "400", "shared_buffers": "128MB",
	}
	if err := c.Init(ctx); err != nil {
		return err
	}
	// The server is started from a goroutine locked to its OS thread that lives until Stop, so the
	// parent-death signal (which follows the starting thread) fires only if this process dies.
	started := make(chan error, 1)
	stopped := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		started <- c.Start(ctx)
		<-stopped
	}()
	if err := <-started; err != nil {
		close(stopped)
		return err
	}
	s.admin = c.URL("postgres")
	s.stop = func() {
		_ = c.Stop()
		close(stopped)
		_ = os.RemoveAll(parent)
	}
	return nil
}

func (s *server) url(db string) string {
	u := *s.base
	u.Path = "/" + db
	return u.String()
}

func (s *server) exec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, s.admin)
	if err != nil {
		return fmt.Errorf("pgtest: connect: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("pgtest: %s: %w", sql, err)
	}
	return nil
}

// URL returns the connection URL of a fresh, migrated database for this test. The database is
// dropped when the test ends if nothing holds a connection to it.
func URL(t testing.TB) string {
	t.Helper()
	once.Do(func() { srv, srvErr = start() })
	if srvErr != nil {
		t.Fatalf("pgtest: %v", srvErr)
	}
	name := fmt.Sprintf("dshd_test_%d_%d", os.Getpid(), counter.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createM.Lock()
	err := srv.exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, templateDB))
	createM.Unlock()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = srv.exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	return srv.url(name)
}

// Pool returns a pool on a fresh, migrated database for this test, closed when the test ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	u := URL(t)
	pool, err := pgxpool.New(context.Background(), u)
	if err != nil {
		t.Fatalf("pgtest: pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}
