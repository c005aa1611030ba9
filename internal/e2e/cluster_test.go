package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/contracttest"
	"github.com/dshd/dshd/internal/pgtest"
)

const adminToken = "e2e-admin-token"

// cluster is one database, one mockllm process and the server processes (replicas) over them,
// with a tenant and a preset whose model is the mock.
type cluster struct {
	t         *testing.T
	serverBin string
	dbURL     string
	leaseTTL  time.Duration
	mockURL   string // http://127.0.0.1:port of the mockllm process
	replicas  []*replica
	key       string // the tenant's API key
	presetID  string
	env       []string // more environment for every replica
}

// replica is one server process.
type replica struct {
	*proc
	url string
}

// newCluster starts mockllm and n replicas over a fresh database, then creates a tenant and a
// preset on the mock model. leaseTTL is the replicas' DSHD_LEASE_TTL.
func newCluster(t *testing.T, n int, leaseTTL time.Duration) *cluster {
	t.Helper()
	return newClusterOn(t, n, leaseTTL, "")
}

// newClusterOn is newCluster over the migrated database at dbURL ("": a fresh one of the test
// process's shared PostgreSQL), with env added to every replica's environment.
func newClusterOn(t *testing.T, n int, leaseTTL time.Duration, dbURL string, env ...string) *cluster {
	t.Helper()
	serverBin, mockBin := buildBinaries(t)
	if dbURL == "" {
		dbURL = pgtest.URL(t)
	}
	c := &cluster{t: t, serverBin: serverBin, dbURL: dbURL, leaseTTL: leaseTTL, env: env}
	c.startMock(mockBin)
	for range n {
		c.startReplica()
	}
	c.setUpTenant()
	return c
}

var mockListening = regexp.MustCompile(`mockllm listening on http://([0-9.]+:[0-9]+)/v1`)

func (c *cluster) startMock(bin string) {
	t := c.t
	t.Helper()
	p := startProc(t, "mockllm", bin, nil, "-addr", "127.0.0.1:0")
	err := waitFor(10*time.Second, func() (bool, error) {
		if m := mockListening.FindStringSubmatch(p.output()); m != nil {
			c.mockURL = "http://" + m[1]
			return true, nil
		}
		if !p.running() {
			return false, fmt.Errorf("mockllm exited: %v", p.waitErr)
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// startReplica starts one more server process and waits until it is ready (/readyz answers 200).
// A port taken between picking it and the server's listen is retried on another port.
func (c *cluster) startReplica() *replica {
	t := c.t
	t.Helper()
	var lastErr error
	for attempt := range 3 {
		addr := freeAddr(t)
		name := fmt.Sprintf("server%d", len(c.replicas)+1)
		if attempt > 0 {
			name += fmt.Sprintf("-retry%d", attempt)
		}
		p := startProc(t, name, c.serverBin, append([]string{
			"DATABASE_URL=" + c.dbURL,
			"DSHD_ADDR=" + addr,
			"DSHD_ADMIN_TOKEN=" + adminToken,
			"DSHD_DEMO_TOOLS=1",
			"DSHD_MODEL_HOSTS=" + c.mockURL[len("http://"):],
			"DSHD_LEASE_TTL=" + c.leaseTTL.String(),
			"DSHD_LOG_LEVEL=warn",
			"DSHD_SHUTDOWN_TIMEOUT=5s",
		}, c.env...), "serve")
		r := &replica{proc: p, url: "http://" + addr}
		if lastErr = r.waitReady(); lastErr == nil {
			contracttest.Serve(t, r.url)
			c.replicas = append(c.replicas, r)
			return r
		}
		p.stop()
	}
	t.Fatalf("replica did not start: %v", lastErr)
	return nil
}

// waitReady waits up to 60 s for /readyz to answer 200, failing early when the process exits.
func (r *replica) waitReady() error {
	return waitFor(60*time.Second, func() (bool, error) {
		if !r.running() {
			return false, fmt.Errorf("%s exited: %v\n%s", r.name, r.waitErr, r.output())
		}
		resp, err := http.Get(r.url + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// freeAddr returns a 127.0.0.1 address with a port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return "127.0.0.1:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// setUpTenant creates a tenant with the admin token and a preset whose model is the mock.
func (c *cluster) setUpTenant() {
	t := c.t
	t.Helper()
	r := c.replicas[0]
	var tenant struct{ APIKey string }
	mustJSON(t, r.call(t.Context(), "POST", "/v1/tenants", adminToken, map[string]string{"name": "e2e"}), 201, &tenant)
	c.key = tenant.APIKey
	var preset struct{ ID string }
	mustJSON(t, r.call(t.Context(), "POST", "/v1/presets", c.key, map[string]any{
		"name":  "e2e",
		"model": map[string]string{"provider": "openai", "model": "mock", "baseUrl": c.mockURL},
	}), 201, &preset)
	c.presetID = preset.ID
}

// sessionCreate creates a session of the cluster's preset and returns its id.
func (c *cluster) sessionCreate(t *testing.T) string {
	t.Helper()
	var s struct{ ID string }
	mustJSON(t, c.replicas[0].call(t.Context(), "POST", "/v1/sessions", c.key, map[string]string{"presetId": c.presetID}), 201, &s)
	return s.ID
}

// waitFor calls check every 20 ms until it reports done or an error, or timeout passes.
func waitFor(timeout time.Duration, check func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		done, err := check()
		if done || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not done within %v", timeout)
		case <-tick.C:
		}
	}
}
