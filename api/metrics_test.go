package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/api"
)

func TestMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pid := e.presetCreate(t, e.keyA, minimalPreset)
	e.do(t, "GET", "/v1/presets/"+pid.String(), e.keyA, nil).want(t, http.StatusOK)
	e.do(t, "GET", "/v1/presets/"+pid.String(), e.keyB, nil).want(t, http.StatusNotFound)
	sid := e.sessionCreate(t, e.keyA)
	e.appendEvents(sid, turnStart(1))
	s := openStream(t, streamURL(e.replica, sid), e.keyA)
	s.next(t)

	scrape := func() string {
		r := e.do(t, "GET", "/metrics", "", nil).want(t, http.StatusOK)
		return string(r.body)
	}
	m := scrape()
	for _, want := range []string{
		`dshd_http_requests_total{method="GET",route="/v1/presets/{id}",status="200"} 1`,
		`dshd_http_requests_total{method="GET",route="/v1/presets/{id}",status="404"} 1`,
		`dshd_http_requests_total{method="POST",route="/v1/presets",status="201"} 2`,
		`dshd_http_request_duration_seconds_count{method="GET",route="/v1/presets/{id}",status="200"} 1`,
		"dshd_sse_streams_open 1",
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	s.resp.Body.Close()
	// The stream's handler notices the closed connection at its next write (the heartbeat), or
	// when the server closes; close it and wait for the gauge to drop.
	e.api.Close()
	// The gauge drops inside the handler, the request is counted once it has returned: wait
	// for both.
	counted := `dshd_http_requests_total{method="GET",route="/v1/sessions/{id}/events",status="200"} 1`
	deadline := time.Now().Add(10 * time.Second)
	for m = scrape(); !strings.Contains(m, "dshd_sse_streams_open 0") || !strings.Contains(m, counted); m = scrape() {
		if time.Now().After(deadline) {
			t.Fatal("the open-streams gauge did not drop, or the stream was not counted, after it ended")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if strings.Contains(m, `dshd_http_request_duration_seconds_count{method="GET",route="/v1/sessions/{id}/events"`) {
		t.Error("the stream is in the latency histogram")
	}
}

// TestMetricsToken: with a MetricsToken, GET /metrics answers 401 problem+json (as openapi.yaml
// says) without that bearer token, and the exposition with it.
func TestMetricsToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) { c.MetricsToken = "scrape-secret" })
	c := loadContract(t)
	for _, key := range []string{"", "scrape-secrets", "wrong"} {
		r := e.do(t, "GET", "/metrics", key, nil)
		r.wantProblem(t, http.StatusUnauthorized, api.CodeUnauthorized)
		c.check("GET", "/metrics", r)
		if strings.Contains(string(r.body), "scrape-secret") || r.header.Get("WWW-Authenticate") == "" {
			t.Errorf("401 %s %v", r.body, r.header)
		}
	}
	r := e.do(t, "GET", "/metrics", "scrape-secret", nil).want(t, http.StatusOK)
	c.check("GET", "/metrics", r)
	if !strings.Contains(string(r.body), "dshd_http_requests_total") {
		t.Errorf("the exposition lacks the HTTP series: %.300s", r.body)
	}
}
