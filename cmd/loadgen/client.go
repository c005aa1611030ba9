package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/dshd/dshd/pkg/eventlog"
)

// client talks to a dshd server with one tenant's API key. It is safe for concurrent use.
type client struct {
	base string
	key  string
	http *http.Client
}

func newClient(base, key string, conns int) *client {
	tr := &http.Transport{MaxIdleConns: conns + 4, MaxIdleConnsPerHost: conns + 4, IdleConnTimeout: time.Minute}
	return &client{base: strings.TrimRight(base, "/"), key: key, http: &http.Client{Transport: tr}}
}

// postJSON posts body as JSON with the bearer token and decodes a 2xx answer into out.
func (c *client) postJSON(ctx context.Context, path, token string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s: %s: %s", path, resp.Status, bytes.TrimSpace(data))
	}
	return json.Unmarshal(data, out)
}

// createTenant creates a tenant with the admin token and returns its API key.
func (c *client) createTenant(ctx context.Context, adminToken, name string) (string, error) {
	var out struct {
		APIKey string `json:"apiKey"`
	}
	err := c.postJSON(ctx, "/v1/tenants", adminToken, map[string]string{"name": name}, &out)
	return out.APIKey, err
}

// createPreset creates the load preset on the OpenAI-compatible model at baseURL.
func (c *client) createPreset(ctx context.Context, baseURL string) (string, error) {
	return c.createPresetMode(ctx, baseURL, "")
}

// createPresetMode is createPreset with tools.mode (native, code, both; "": the default).
func (c *client) createPresetMode(ctx context.Context, baseURL, mode string) (string, error) {
	body := map[string]any{"name": "load", "model": map[string]string{"provider": "openai", "model": "mock", "baseUrl": baseURL}}
	if mode != "" {
		body["tools"] = map[string]string{"mode": mode}
	}
	var out struct {
		ID string `json:"id"`
	}
	err := c.postJSON(ctx, "/v1/presets", c.key, body, &out)
	return out.ID, err
}

func (c *client) createSession(ctx context.Context, presetID string) (string, error) {
	var out struct {
		ID string `json:"id"`
	}
	err := c.postJSON(ctx, "/v1/sessions", c.key, map[string]string{"presetId": presetID}, &out)
	return out.ID, err
}

// turnResult is what one streamed turn delivered.
type turnResult struct {
	Events int    // SSE events received (comments excluded)
	Steps  int    // assistant/message events among them: one per model call
	End    string // the data of the last turn/end event
}

// turn posts content to the session with Accept: text/event-stream and reads the stream until the
// server ends it; it fails unless the stream ended with turn/end.
func (c *client) turn(ctx context.Context, sessionID, content string) (turnResult, error) {
	b, _ := json.Marshal(map[string]string{"content": content})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/sessions/"+sessionID+"/messages", bytes.NewReader(b))
	if err != nil {
		return turnResult{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+c.key)
	resp, err := c.http.Do(req)
	if err != nil {
		return turnResult{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		return turnResult{}, fmt.Errorf("POST messages: %s: %s", resp.Status, bytes.TrimSpace(data))
	}
	res, last, err := readSSE(resp.Body)
	if err != nil {
		return res, err
	}
	if last != "turn/end" {
		return res, fmt.Errorf("stream ended after %d events with %q, not turn/end", res.Events, last)
	}
	var ev eventlog.Event
	if err := json.Unmarshal([]byte(res.End), &ev); err != nil {
		return res, fmt.Errorf("turn did not complete: %s", res.End)
	}
	if end, err := eventlog.Decode[eventlog.TurnEnd](ev); err != nil || eventlog.TurnOutcome(end.Reason) != eventlog.OutcomeCompleted {
		return res, fmt.Errorf("turn did not complete: %s", res.End)
	}
	return res, nil
}

// readSSE counts the events of an SSE stream until EOF and returns the type of the last one.
func readSSE(r io.Reader) (res turnResult, last string, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	var typ, data string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if typ != "" || data != "" {
				res.Events++
				last = typ
				switch typ {
				case "turn/end":
					res.End = data
				case "assistant/message":
					res.Steps++
				}
			}
			typ, data = "", ""
		case strings.HasPrefix(line, "event:"):
			typ = strings.TrimSpace(line[len("event:"):])
		case strings.HasPrefix(line, "data:"):
			data += strings.TrimPrefix(line[len("data:"):], " ")
		}
	}
	return res, last, sc.Err()
}
