package api_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dshd/dshd/api"
	"github.com/dshd/dshd/internal/pgtest"
	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/preset"
)

// TestUnavailableDatabaseAnswers503: while a server's database is unreachable (its connections
// go through a proxy that is down: open ones are cut, new ones refused), every request that needs
// the database answers a 503 `unavailable` problem with Retry-After, never a 500; once the
// database is reachable again the same requests succeed.
func TestUnavailableDatabaseAnswers503(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sid := e.sessionCreate(t, e.keyA)
	pid := e.presetCreate(t, e.keyA, minimalPreset)
	proxy := pgtest.NewProxy(t, e.pool.Config().ConnString())
	pool, err := pgxpool.New(context.Background(), proxy.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	presets := pgstore.NewPresets(pool, preset.Rules{ModelHosts: e.modelHosts()})
	srv := api.New(api.Config{
		Tenants: pgstore.NewTenants(pool),
		Presets: presets,
		Log:     pgstore.NewStore(pool, pgstore.StoreConfig{}),
		Hub:     pgstore.NewHub(pool, pgstore.HubConfig{}),
		Logger:  slog.New(slog.NewJSONHandler(io.Discard, nil)),
	})
	ts := httptest.NewServer(srv)
	kinServe(t, ts.URL)
	t.Cleanup(func() { srv.Close(); ts.Close() })
	r := &replica{api: srv, url: ts.URL}
	paths := []string{
		"/v1/sessions/" + sid.String(),
		"/v1/sessions/" + sid.String() + "/events?after=-1",
		"/v1/sessions",
		"/v1/presets/" + pid.String(),
		"/v1/presets",
	}
	for _, p := range paths {
		r.do(t, "GET", p, e.keyA, nil).want(t, http.StatusOK)
	}
	proxy.Down()
	for _, p := range paths {
		resp := r.do(t, "GET", p, e.keyA, nil)
		resp.wantProblem(t, http.StatusServiceUnavailable, api.CodeUnavailable)
		if ra := resp.header.Get("Retry-After"); ra != "2" {
			t.Errorf("GET %s: Retry-After %q, want 2", p, ra)
		}
	}
	proxy.Up(t)
	for _, p := range paths {
		r.do(t, "GET", p, e.keyA, nil).want(t, http.StatusOK)
	}
}
