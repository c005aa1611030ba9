package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/contracttest"
	"github.com/dshd/dshd/pkg/eventlog"
)

// client is the HTTP client of the tests: enough idle connections per replica for 50 sessions'
// requests and streams at once, and the first 25 exchanges of each operation and status with a
// replica checked against openapi.yaml (internal/contracttest: the tests poll logs many times a
// second, and a check costs milliseconds of CPU).
var client = &http.Client{Transport: contracttest.SampledTransport(&http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 128}, 25)}

// reply is a finished HTTP exchange, or the error that prevented it.
type reply struct {
	status int
	header http.Header
	body   []byte
	err    error
}

// call sends a request to the replica with key as the bearer token; body, when not nil, is sent
// as JSON. headers are name, value pairs. It is safe to call from any goroutine.
func (r *replica) call(ctx context.Context, method, path, key string, body any, headers ...string) reply {
	var rd io.Reader
	if body != nil {
		js, err := json.Marshal(body)
		if err != nil {
			return reply{err: err}
		}
		rd = bytes.NewReader(js)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.url+path, rd)
	if err != nil {
		return reply{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return reply{err: fmt.Errorf("%s %s%s: %w", method, r.url, path, err)}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: data, err: err}
}

// decode checks the status and decodes the JSON body into v (when v is not nil).
func (rp reply) decode(status int, v any) error {
	if rp.err != nil {
		return rp.err
	}
	if rp.status != status {
		return fmt.Errorf("status %d, want %d: %s", rp.status, status, rp.body)
	}
	if v == nil {
		return nil
	}
	if err := json.Unmarshal(rp.body, v); err != nil {
		return fmt.Errorf("body %s: %w", rp.body, err)
	}
	return nil
}

// mustJSON is decode for the test goroutine: it fails the test on an error.
func mustJSON(t *testing.T, rp reply, status int, v any) {
	t.Helper()
	if err := rp.decode(status, v); err != nil {
		t.Fatal(err)
	}
}

// posted is the 202 answer to a posted message.
type posted struct {
	MessageID string `json:"messageId"`
	Seq       int64  `json:"seq"`
}

// postMessage posts {content, mode} to the session; headers are extra name, value pairs.
func (r *replica) postMessage(ctx context.Context, key, sid, content, mode string, headers ...string) (posted, error) {
	var p posted
	err := r.call(ctx, "POST", "/v1/sessions/"+sid+"/messages", key,
		map[string]string{"content": content, "mode": mode}, headers...).decode(http.StatusAccepted, &p)
	if err == nil && p.MessageID == "" {
		err = fmt.Errorf("202 without a messageId")
	}
	return p, err
}

// storedEvent is an event of the log with its JSON exactly as the server sent it.
type storedEvent struct {
	eventlog.Event
	raw json.RawMessage
}

// events reads the session's whole log through the JSON pages.
func (r *replica) events(ctx context.Context, key, sid string) ([]storedEvent, error) {
	var out []storedEvent
	after := int64(-1)
	for {
		var page struct {
			Events    []json.RawMessage `json:"events"`
			NextAfter int64             `json:"nextAfter"`
		}
		path := fmt.Sprintf("/v1/sessions/%s/events?after=%d&limit=1000", sid, after)
		if err := r.call(ctx, "GET", path, key, nil).decode(http.StatusOK, &page); err != nil {
			return nil, err
		}
		if len(page.Events) == 0 {
			return out, nil
		}
		for _, raw := range page.Events {
			ev, err := parseEvent(raw)
			if err != nil {
				return nil, err
			}
			out = append(out, ev)
		}
		after = page.NextAfter
	}
}

func parseEvent(raw []byte) (storedEvent, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return storedEvent{}, fmt.Errorf("event %s: %w", raw, err)
	}
	ev := storedEvent{raw: buf.Bytes()}
	if err := json.Unmarshal(raw, &ev.Event); err != nil {
		return storedEvent{}, fmt.Errorf("event %s: %w", raw, err)
	}
	return ev, nil
}

// plain returns the events without their raw JSON, for the eventlog checkers.
func plain(evs []storedEvent) []eventlog.Event {
	out := make([]eventlog.Event, len(evs))
	for i, ev := range evs {
		out[i] = ev.Event
	}
	return out
}

// waitEvents polls the session's log on r until done accepts it, for at most timeout.
func (r *replica) waitEvents(t *testing.T, key, sid string, timeout time.Duration, done func([]storedEvent) bool) []storedEvent {
	t.Helper()
	var evs []storedEvent
	err := waitFor(timeout, func() (bool, error) {
		var err error
		evs, err = r.events(t.Context(), key, sid)
		return err == nil && done(evs), err
	})
	if err != nil {
		t.Fatalf("session %s: %v; log:\n%s", sid, err, describe(evs))
	}
	return evs
}

// describe renders events one a line, for failure messages.
func describe(evs []storedEvent) string {
	var b bytes.Buffer
	for _, ev := range evs {
		fmt.Fprintf(&b, "  %d %s %s\n", ev.Seq, ev.Type, ev.Data)
	}
	return b.String()
}
