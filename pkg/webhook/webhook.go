// Package webhook is the wire side of tenant webhooks (docs/webhooks.md): the signing scheme of
// the Standard Webhooks convention, a Verify for receivers, the retry schedule, and a Sender that
// makes one delivery attempt through an address-guarded transport (pkg/netguard). What is
// delivered, and when, is kept in the database (pkg/pgstore, the webhook_deliveries outbox) and
// driven by pkg/worker.
//
// A delivery is a POST of the event's JSON body with three headers:
//
//	webhook-id: <event id>              the same on every attempt and for every endpoint
//	webhook-timestamp: <unix seconds>   the time of this attempt
//	webhook-signature: v1,<base64>      HMAC-SHA256 of "<id>.<timestamp>.<body>"
//
// keyed with the endpoint's secret, which is shown as "whsec_" and the base64 of its 32 bytes.
package webhook

import (
	"crypto/hmac"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The delivery headers.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// SecretPrefix starts the text form of a signing secret; SecretBytes is the size of a new one.
const (
	SecretPrefix = "whsec_"
	SecretBytes  = 32
)

// DefaultTolerance is how far a signature's timestamp may be from the receiver's clock in
// Verify's usual use: older deliveries are refused as possible replays.
const DefaultTolerance = 5 * time.Minute

// NewSecret returns a fresh random signing secret.
func NewSecret() []byte {
	b := make([]byte, SecretBytes)
	_, _ = crand.Read(b) // never fails (crypto/rand panics rather than return an error)
	return b
}

// FormatSecret is the text form of a secret: "whsec_" and its standard base64.
func FormatSecret(key []byte) string { return SecretPrefix + base64.StdEncoding.EncodeToString(key) }

// ParseSecret reads the text form of a secret (the prefix is optional).
func ParseSecret(s string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, SecretPrefix))
	if err != nil || len(key) == 0 {
		return nil, errors.New("webhook: a secret is whsec_ and base64")
	}
	return key, nil
}

// Sign returns the webhook-signature value of a delivery: "v1," and the base64 HMAC-SHA256 of
// "<id>.<unix seconds of at>.<body>" under key.
func Sign(key []byte, id string, at time.Time, body []byte) string {
	return "v1," + base64.StdEncoding.EncodeToString(mac(key, id, strconv.FormatInt(at.Unix(), 10), body))
}

func mac(key []byte, id, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte("."))
	m.Write([]byte(ts))
	m.Write([]byte("."))
	m.Write(body)
	return m.Sum(nil)
}

// Errors of Verify.
var (
	ErrMissingHeaders = errors.New("webhook: the webhook-id, webhook-timestamp or webhook-signature header is missing")
	ErrTimestamp      = errors.New("webhook: the timestamp is malformed or outside the tolerance")
	ErrSignature      = errors.New("webhook: no signature matches")
)

// Verify checks a delivery as a receiver gets it: secret is the endpoint's secret as shown at its
// creation ("whsec_..."), h the request's headers, body its exact bytes. It accepts when the
// timestamp is within tolerance of now and one of the space-separated v1 signatures equals the
// body's (compared in constant time). Receivers should also drop a webhook-id they have already
// processed: deliveries are at least once.
func Verify(secret string, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	key, err := ParseSecret(secret)
	if err != nil {
		return err
	}
	id, ts, sigs := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if id == "" || ts == "" || sigs == "" {
		return ErrMissingHeaders
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return ErrTimestamp
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return ErrTimestamp
	}
	want := mac(key, id, ts, body)
	for _, s := range strings.Fields(sigs) {
		v, sig, ok := strings.Cut(s, ",")
		if !ok || v != "v1" {
			continue
		}
		if got, err := base64.StdEncoding.DecodeString(sig); err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return ErrSignature
}

// Schedule is the retry schedule of a delivery: after failed attempt n (1-based) the next one
// waits Base·2^(n-1), at most Max, with jitter (a uniformly random point in the upper half of
// that wait); after Attempts attempts the delivery has failed.
type Schedule struct {
	Base     time.Duration
	Max      time.Duration
	Attempts int
}

// DefaultSchedule: 5 s doubling, at most an hour between attempts, 12 attempts (the last about
// 2.8 hours after the first, before jitter).
var DefaultSchedule = Schedule{Base: 5 * time.Second, Max: time.Hour, Attempts: 12}

// Next returns the wait after failed attempt n, and false when n was the last attempt.
func (s Schedule) Next(n int) (time.Duration, bool) {
	if n >= s.Attempts {
		return 0, false
	}
	d := s.Base
	for i := 1; i < n && d < s.Max; i++ {
		d *= 2
	}
	d = min(d, s.Max)
	half := d / 2
	if half <= 0 {
		return d, true
	}
	return half + rand.N(d-half+1), true
}
