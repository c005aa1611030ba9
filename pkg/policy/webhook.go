package policy

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/netguard"
	"github.com/dshd/dshd/pkg/registry"
)

// The webhook protocol. dshd POSTs a JSON body (BatchRequest or PostRequest) with the headers
// below to the preset's URL and expects a 2xx answer with a JSON body (BatchAnswer or
// PostAnswer) of at most MaxAnswerBytes (per call of the request, for a BatchRequest). Redirects are not followed (a 3xx answer fails).
//
// The signature header is `X-Dshd-Signature: t=<unix seconds>,v1=<hex>`, where hex is the
// HMAC-SHA256, keyed with the preset's signing secret (the bytes of the string Secret returns),
// of the timestamp, a ".", and the exact body bytes. A receiver recomputes it, compares in
// constant time, and refuses a timestamp far from its clock (Verify does all three).
const (
	HeaderSignature = "X-Dshd-Signature"
	HeaderEvent     = "X-Dshd-Event" // "preExecuteBatch" (EventPreExecuteBatch) or "postExecute"

	EventPostExecute = "postExecute"

	// MaxAnswerBytes bounds a webhook's answer body, per call of its request; a larger one
	// fails the request.
	MaxAnswerBytes = 64 << 10
)

// PreRequest describes one call in a post-execute request. (Before extension E5 it was also the
// per-call pre-execute request, which BatchRequest replaced.)
type PreRequest struct {
	Event         string          `json:"event"` // "postExecute"
	PresetID      string          `json:"presetId"`
	PresetVersion int             `json:"presetVersion"`
	SessionID     string          `json:"sessionId"` // the calling agent; empty outside a session
	CallID        string          `json:"callId"`
	Tool          string          `json:"tool"`
	Arguments     json.RawMessage `json:"arguments"`
	Turn          int             `json:"turn"`
	Step          int             `json:"step"`
}

// PostRequest is the body of a post-execute webhook call: the call and its result as the model
// would see it (the value stays inside dshd, RES-4).
type PostRequest struct {
	PreRequest
	Result ResultView `json:"result"`
}

// ResultView is a result as a post-execute webhook sees it.
type ResultView struct {
	IsError bool                `json:"isError"`
	Content []llm.Block         `json:"content"`
	Error   *registry.ToolError `json:"error,omitempty"`
}

// PreAnswer is a pre-execute webhook's decision on one call (BatchDecision): decision allow, deny (with an optional reason)
// or ask (the call asks for approval, with the optional reason).
type PreAnswer struct {
	Decision string `json:"decision"`
	Reason   string `json:"reason"`
}

// PostAnswer is a post-execute webhook's answer: action accept (the result is kept), block (the
// result becomes a failure whose content and message are feedback) or replace (the content
// becomes content; value and isError are kept).
type PostAnswer struct {
	Action   string `json:"action"`
	Feedback string `json:"feedback"`
	Content  string `json:"content"`
}

// secretLabel separates the derivation of webhook secrets from any other use of the key.
const secretLabel = "dshd policy webhook secret v1\x00"

// Secret returns the signing secret of a preset's webhooks: "whsec_" and the hex HMAC-SHA256 of
// the preset id under the operator's key. It is the same for every version of the preset and on
// every replica; changing the key changes every preset's secret.
func Secret(key []byte, presetID uuid.UUID) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(secretLabel))
	mac.Write(presetID[:])
	return "whsec_" + hex.EncodeToString(mac.Sum(nil))
}

// Sign returns the X-Dshd-Signature value of body sent at t.
func Sign(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

func mac(secret, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts))
	m.Write([]byte("."))
	m.Write(body)
	return m.Sum(nil)
}

// Verify checks an X-Dshd-Signature header for body: a well-formed header, a timestamp within
// tolerance of now, and a v1 signature equal (in constant time) to the body's.
func Verify(secret, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var ts string
	var sigs [][]byte
	for part := range strings.SplitSeq(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			if b, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return errors.New("policy: malformed signature header")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return errors.New("policy: signature timestamp outside the tolerance")
	}
	want := mac(secret, ts, body)
	for _, s := range sigs {
		if hmac.Equal(s, want) {
			return nil
		}
	}
	return errors.New("policy: signature mismatch")
}

// ClientConfig configures a Client.
type ClientConfig struct {
	// AllowHTTP allows http:// URLs (tests); otherwise a call to one fails.
	AllowHTTP bool
	// AllowPrivate allows connections to addresses that are not public (netguard.PublicAddr): loopback,
	// private, link-local. Otherwise every address a call connects to, after name resolution,
	// is checked when it is dialled, and a non-public one fails the call.
	AllowPrivate bool
	// RootCAs replaces the system roots for https (tests: httptest's certificate).
	RootCAs *x509.CertPool
	// Now is the clock of the signatures; default time.Now.
	Now func() time.Time
}

// Client calls policy webhooks. It is safe for concurrent use.
type Client struct {
	cfg ClientConfig
	hc  *http.Client
}

// NewClient returns a webhook client. It uses no proxy, follows no redirect, and checks the
// address of every connection it dials (ClientConfig.AllowPrivate; netguard.NewTransport).
func NewClient(cfg ClientConfig) *Client {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	tr := netguard.NewTransport(netguard.TransportConfig{AllowPrivate: cfg.AllowPrivate, RootCAs: cfg.RootCAs})
	return &Client{cfg: cfg, hc: &http.Client{Transport: tr, CheckRedirect: netguard.NoRedirects}}
}

// Call POSTs payload, signed with secret, to rawURL as event, and decodes the 2xx answer into
// answer, all within timeout. Its errors are messages for a tool result: they say what failed
// and repeat no more of the URL than its host.
func (c *Client) Call(ctx context.Context, rawURL, secret string, timeout time.Duration, event string, payload, answer any) error {
	return c.call(ctx, rawURL, secret, timeout, event, payload, answer, MaxAnswerBytes)
}

// call is Call with limit as the bound of the answer's body.
func (c *Client) call(ctx context.Context, rawURL, secret string, timeout time.Duration, event string, payload, answer any, limit int64) error {
	if err := CheckURL(rawURL, c.cfg.AllowHTTP, true); err != nil {
		return fmt.Errorf("the webhook URL is not allowed: %v", err)
	}
	body, err := json.Marshal(payload)
	if err != nil {
		return fmt.Errorf("the request cannot be encoded: %v", err)
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, rawURL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("the webhook URL is not allowed: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "dshd-policy-webhook/1")
	req.Header.Set(HeaderEvent, event)
	req.Header.Set(HeaderSignature, Sign(secret, c.cfg.Now(), body))
	resp, err := c.hc.Do(req)
	if err != nil {
		return c.transportError(ctx, cctx, timeout, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return c.transportError(ctx, cctx, timeout, err)
	}
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return fmt.Errorf("the webhook answered HTTP %d (redirects are not followed)", resp.StatusCode)
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return fmt.Errorf("the webhook answered HTTP %d", resp.StatusCode)
	case int64(len(data)) > limit:
		return fmt.Errorf("the webhook's answer is larger than %d bytes", limit)
	}
	if err := json.Unmarshal(data, answer); err != nil {
		return fmt.Errorf("the webhook's answer is not a JSON object of the expected shape")
	}
	return nil
}

// transportError words a failed request: a timeout, a cancelled call, a refused address or
// another transport failure (without the URL, which the error repeats).
func (c *Client) transportError(ctx, cctx context.Context, timeout time.Duration, err error) error {
	var np netguard.NotPublicError
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("the call was cancelled: %w", context.Canceled)
	case errors.Is(cctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("the webhook did not answer within %dms", timeout.Milliseconds())
	case errors.As(err, &np):
		return np
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return fmt.Errorf("the request failed: %s", clip(err.Error(), 256))
}

// preWebhook decides e by the pre-execute webhook's answer: the answer to its group's request
// (E5, batchFor), sent now if this is the first call of the group to reach the webhook. It fails
// closed: a failed request, an answer without a known decision for e, denies the call, except a
// cancelled call, which it allows so that the registry ends it ABORTED_BEFORE_DISPATCH (PIPE-7;
// guards still run first, and the body never does).
func (s *Set) preWebhook(ctx context.Context, e *registry.Execution, env Env) registry.Decision {
	ans, err := s.batchFor(ctx, e, env).answer(ctx, e.CallID)
	if err == nil {
		reason := clip(ans.Reason, MaxReasonBytes)
		switch ans.Decision {
		case DecisionAllow:
			return registry.Allow()
		case DecisionDeny:
			if reason == "" {
				reason = fmt.Sprintf("tool %q is denied by the pre-execute policy webhook", e.Name)
			}
			return registry.Deny(reason)
		case DecisionAsk:
			return registry.Ask(reason)
		}
		err = fmt.Errorf(`the webhook answered an unknown decision %q (want "allow", "deny" or "ask")`, echo(ans.Decision))
	}
	if ctx.Err() != nil {
		return registry.Allow()
	}
	return registry.Deny("pre-execute policy webhook failed: " + err.Error())
}

// postWebhook asks the post-execute webhook; decided is false for accept. It fails closed: any
// failure blocks the result with the reason as feedback, except a cancelled call, whose result
// is accepted so that the registry's cancel override applies (PIPE-16).
func (s *Set) postWebhook(ctx context.Context, c *registry.Call, env Env) (d registry.PostDecision, decided bool) {
	fail := func(err error) (registry.PostDecision, bool) {
		if ctx.Err() != nil {
			return registry.PostDecision{}, false
		}
		env.Logger.WarnContext(ctx, "policy: post-execute webhook failed", "preset", env.PresetID,
			"version", env.PresetVersion, "tool", c.Exec.Name, "callId", c.Exec.CallID, "err", err)
		return blockWith("post-execute policy webhook failed: " + err.Error()), true
	}
	if env.Client == nil {
		return fail(errDisabled)
	}
	req := PostRequest{PreRequest: requestOf(c.Exec, env, EventPostExecute),
		Result: ResultView{IsError: c.Result.IsError, Content: c.Result.Content, Error: c.Result.Error}}
	if req.Result.Content == nil {
		req.Result.Content = []llm.Block{}
	}
	var ans PostAnswer
	if err := env.Client.Call(ctx, s.postURL, env.Secret, s.timeout, EventPostExecute, req, &ans); err != nil {
		return fail(err)
	}
	switch ans.Action {
	case ActionAccept:
		return registry.PostDecision{}, false
	case ActionBlock:
		if ans.Feedback == "" {
			return registry.PostDecision{Kind: registry.PostBlock}, true
		}
		return blockWith(ans.Feedback), true
	case ActionReplace:
		return registry.PostDecision{Content: []llm.Block{llm.TextBlock(ans.Content)}}, true
	}
	return fail(fmt.Errorf(`the webhook answered an unknown action %q (want "accept", "block" or "replace")`, echo(ans.Action)))
}

var errDisabled = errors.New("policy webhooks are disabled on this server")

func blockWith(text string) registry.PostDecision {
	return registry.PostDecision{Kind: registry.PostBlock, Feedback: []llm.Block{llm.TextBlock(text)}}
}

func requestOf(e *registry.Execution, env Env, event string) PreRequest {
	args := e.Args
	if len(args) == 0 {
		args = json.RawMessage("null")
	}
	return PreRequest{Event: event, PresetID: env.PresetID, PresetVersion: env.PresetVersion, SessionID: e.Agent,
		CallID: e.CallID, Tool: e.Name, Arguments: args, Turn: e.Location.Turn, Step: e.Location.Step}
}

// clip returns at most max bytes of s, cut at a rune boundary and marked with "…" when cut.
func clip(s string, max int) string { return netguard.Clip(s, max) }
