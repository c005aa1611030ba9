package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Client calls one server with one API key. The key is sent, never printed.
type Client struct {
	base string
	key  string
	http *http.Client
}

// NewClient returns a client of the server at base (http://host:port) with the API key.
func NewClient(base, key string) *Client {
	return &Client{base: strings.TrimRight(base, "/"), key: key, http: &http.Client{}}
}

// APIError is an error answer of the server (application/problem+json), or another non-2xx.
type APIError struct {
	Status int
	Code   string
	Detail string
}

func (e *APIError) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("http %d: %s", e.Status, e.Detail)
	}
	return e.Code + ": " + e.Detail
}

// requestTimeout bounds a plain (non-stream) request.
const requestTimeout = 30 * time.Second

func (c *Client) newRequest(ctx context.Context, method, path string, body any, header http.Header) (*http.Request, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		enc, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(enc)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}

// Do sends a JSON request and decodes a 2xx answer into out (when not nil); any other answer is
// an *APIError.
func (c *Client) Do(ctx context.Context, method, path string, body, out any) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := c.newRequest(ctx, method, path, body, nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return readAPIError(resp)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	if raw, ok := out.(*json.RawMessage); ok {
		*raw = append((*raw)[:0], b...)
		return nil
	}
	return json.Unmarshal(b, out)
}

// Stream sends a request that answers text/event-stream and returns the open response. A
// non-2xx answer is an *APIError.
func (c *Client) Stream(ctx context.Context, method, path string, body any, lastEventID string) (*http.Response, error) {
	h := http.Header{"Accept": {"text/event-stream"}}
	if lastEventID != "" {
		h.Set("Last-Event-ID", lastEventID)
	}
	req, err := c.newRequest(ctx, method, path, body, h)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, readAPIError(resp)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		resp.Body.Close()
		return nil, fmt.Errorf("expected an event stream, got %q", ct)
	}
	resp.Body = newIdleBody(resp.Body, streamIdleTimeout)
	return resp, nil
}

// streamIdleTimeout is how long a stream may send nothing, not even a heartbeat (the server
// sends one every 15 s), before it counts as dropped: its body is closed and the reader resumes.
const streamIdleTimeout = time.Minute

// idleBody closes a response body that has not delivered a byte for the timeout, so a
// connection that died silently ends the read instead of hanging it.
type idleBody struct {
	io.ReadCloser
	timer   *time.Timer
	timeout time.Duration
}

func newIdleBody(rc io.ReadCloser, timeout time.Duration) *idleBody {
	b := &idleBody{ReadCloser: rc, timeout: timeout}
	b.timer = time.AfterFunc(timeout, func() { rc.Close() })
	return b
}

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.timer.Reset(b.timeout)
	}
	return n, err
}

func (b *idleBody) Close() error {
	b.timer.Stop()
	return b.ReadCloser.Close()
}

func readAPIError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &APIError{Status: resp.StatusCode}
	var p struct {
		Code   string `json:"code"`
		Detail string `json:"detail"`
		Title  string `json:"title"`
	}
	if json.Unmarshal(b, &p) == nil && p.Code != "" {
		e.Code, e.Detail = p.Code, p.Detail
		if e.Detail == "" {
			e.Detail = p.Title
		}
		return e
	}
	e.Detail = strings.TrimSpace(string(b))
	if e.Detail == "" {
		e.Detail = http.StatusText(resp.StatusCode)
	}
	return e
}
