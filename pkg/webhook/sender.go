package webhook

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/dshd/dshd/pkg/netguard"
)

// MaxErrorBytes bounds the error text of an attempt (the delivery log's lastError).
const MaxErrorBytes = 256

// SenderConfig configures a Sender.
type SenderConfig struct {
	// AllowHTTP allows http:// endpoints (tests); otherwise an attempt to one fails.
	AllowHTTP bool
	// AllowPrivate allows endpoints on loopback, private and link-local addresses (tests,
	// private deployments); otherwise every address an attempt dials is checked and a
	// non-public one fails the attempt.
	AllowPrivate bool
	// RootCAs replaces the system roots for https (tests).
	RootCAs *x509.CertPool
	// Timeout bounds one attempt, from dialling to the end of the answer. Default 10 s.
	Timeout time.Duration
	// Now is the clock of the signatures. Default time.Now.
	Now func() time.Time
}

// Sender makes delivery attempts. It uses no proxy, follows no redirect and reads at most 64 KiB
// of an answer. It is safe for concurrent use.
type Sender struct {
	cfg SenderConfig
	hc  *http.Client
}

// NewSender returns a Sender.
func NewSender(cfg SenderConfig) *Sender {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	tr := netguard.NewTransport(netguard.TransportConfig{AllowPrivate: cfg.AllowPrivate, RootCAs: cfg.RootCAs})
	return &Sender{cfg: cfg, hc: &http.Client{Transport: tr, CheckRedirect: netguard.NoRedirects}}
}

// Result is the outcome of one attempt: the HTTP status (0 when there was no answer) and, unless
// it succeeded (a 2xx answer), a short error that repeats nothing of the URL but its host.
type Result struct {
	Status int
	Err    string
}

// OK reports whether the attempt succeeded.
func (r Result) OK() bool { return r.Err == "" }

// Send POSTs body to rawURL as delivery id, signed with key at this moment.
func (s *Sender) Send(ctx context.Context, rawURL string, key []byte, id string, body []byte) Result {
	if err := netguard.CheckURL(rawURL, s.cfg.AllowHTTP, s.cfg.AllowPrivate); err != nil {
		return Result{Err: "the endpoint URL is not allowed: " + err.Error()}
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, rawURL, bytes.NewReader(body))
	if err != nil {
		return Result{Err: "the endpoint URL is not allowed"}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "dshd-webhooks/1")
	req.Header.Set(HeaderID, id)
	at := s.cfg.Now()
	req.Header.Set(HeaderTimestamp, fmt.Sprint(at.Unix()))
	req.Header.Set(HeaderSignature, Sign(key, id, at, body))
	resp, err := s.hc.Do(req)
	if err != nil {
		return Result{Err: s.transportError(ctx, cctx, err)}
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // lets the connection be reused
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode <= 299:
		return Result{Status: resp.StatusCode}
	case resp.StatusCode >= 300 && resp.StatusCode <= 399:
		return Result{Status: resp.StatusCode, Err: fmt.Sprintf("the endpoint answered HTTP %d (redirects are not followed)", resp.StatusCode)}
	}
	return Result{Status: resp.StatusCode, Err: fmt.Sprintf("the endpoint answered HTTP %d", resp.StatusCode)}
}

// transportError words a failed request without its URL.
func (s *Sender) transportError(ctx, cctx context.Context, err error) string {
	var np netguard.NotPublicError
	switch {
	case ctx.Err() != nil:
		return "the attempt was cancelled (the server stopped)"
	case errors.Is(cctx.Err(), context.DeadlineExceeded):
		return fmt.Sprintf("the endpoint did not answer within %v", s.cfg.Timeout)
	case errors.As(err, &np):
		return np.Error()
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return netguard.Clip("the request failed: "+err.Error(), MaxErrorBytes)
}
