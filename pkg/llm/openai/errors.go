package openai

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/dshd/dshd/pkg/llm"
)

// errIdle is the cancellation cause when no byte arrived for Config.IdleTimeout.
var errIdle = errors.New("openai: no data received within the idle timeout")

// statusError maps a non-2xx response to an *llm.Error:
//
//	401, 403                                   INVALID_CREDENTIAL
//	402, or any 4xx mentioning an insufficient
//	balance or quota                           QUOTA
//	400, 413, 422 mentioning the context length CONTEXT_WINDOW_EXCEEDED
//	408                                        TIMEOUT
//	429                                        RATE_LIMIT (retryable)
//	5xx                                        SERVER (retryable)
//	any other status (3xx included)            SERVER, not retryable
//
// The message reaches the tenant (turn/end), and the endpoint may be anything a preset points
// at, so the body itself is never quoted: the message is the provider's JSON error message
// ({"error":{"message":...}}, {"error":"..."} or {"message":"..."}), clipped to
// maxErrorMessage bytes without control characters, or else "HTTP <status>". A body that is not
// such JSON still classifies the error (quota, context length) without appearing in it.
func statusError(status int, body []byte) *llm.Error {
	if ae, ok := jsonError(body); ok {
		return apiError(status, ae)
	}
	e := classify(status, strings.ToLower(string(body)), fmt.Sprintf("HTTP %d", status))
	return e
}

// jsonError reads the provider's error object of a JSON error body.
func jsonError(body []byte) (APIError, bool) {
	var eb struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(body, &eb) != nil {
		return APIError{}, false
	}
	var ae APIError
	var text string
	switch {
	case json.Unmarshal(eb.Error, &ae) == nil && ae.Message != "":
	case json.Unmarshal(eb.Error, &text) == nil && text != "":
		ae = APIError{Message: text}
	case eb.Message != "":
		ae = APIError{Message: eb.Message}
	default:
		return APIError{}, false
	}
	if cleanMessage(ae.Message) == "" {
		return APIError{}, false
	}
	return ae, true
}

// maxErrorMessage bounds the provider's error message kept in an *llm.Error.
const maxErrorMessage = 300

// cleanMessage clips a provider's error message to maxErrorMessage bytes and replaces control
// characters and invalid UTF-8 with spaces. It clips between words, never inside one: a word (a
// run without spaces) that would cross the limit is dropped whole, so a secret the provider
// echoed (its key, a proxy's token) is either kept whole, for the masking of keys to find, or
// not kept at all, never kept in part.
func cleanMessage(msg string) string {
	var b strings.Builder
	var word strings.Builder
	space := false
	for _, r := range strings.ToValidUTF8(msg, " ") {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || unicode.IsSpace(r) {
			if word.Len() > 0 {
				b.WriteString(word.String())
				word.Reset()
			}
			space = b.Len() > 0
			continue
		}
		if word.Len() == 0 && space {
			word.WriteByte(' ')
			space = false
		}
		if b.Len()+word.Len()+utf8.RuneLen(r) > maxErrorMessage {
			b.WriteString("...")
			return b.String()
		}
		word.WriteRune(r)
	}
	b.WriteString(word.String())
	return b.String()
}

// apiError classifies an error object by status (0 for an error inside a 200 stream) and text.
// Its message is the object's message, cleaned (cleanMessage).
func apiError(status int, ae APIError) *llm.Error {
	msg := maskKeys(cleanMessage(ae.Message))
	if msg == "" {
		msg = "the provider reported an error"
		if status != 0 {
			msg = fmt.Sprintf("HTTP %d", status)
		}
	}
	return classify(status, strings.ToLower(ae.Message+" "+ae.Type+" "+string(ae.Code)), msg)
}

// keyLike matches what looks like a credential inside a provider's error message: an
// `sk-`-style key or a bearer token, as some providers echo the key they were sent, or a JWT
// (`eyJ…`, as proxies take).
var keyLike = regexp.MustCompile(`(?i)\b(sk-|bearer\s+)[A-Za-z0-9._*\-]{6,}|\b(eyJ)[A-Za-z0-9_\-]{6,}\.[A-Za-z0-9._\-]*`)

// maskKeys replaces every credential-like run of msg by its prefix and "***", so a provider's
// message can go into an event, an API error and a log line.
func maskKeys(msg string) string {
	return keyLike.ReplaceAllString(msg, "${1}${2}***")
}

// maskKey replaces every occurrence of the client's own key in the message of an *llm.Error in
// err's chain by "***": a provider may echo the key it was sent, and a tenant's key (which need
// not look like an `sk-` key, which maskKeys catches) must never reach an event, an API error or
// a log line. A message that ends in a prefix of the key of at least minKeyPrefix bytes (cut
// there by a clip) loses that prefix too; cleanMessage never cuts inside a word, so this is a
// second guard.
func maskKey(err error, key string) error {
	var le *llm.Error
	if key == "" || !errors.As(err, &le) {
		return err
	}
	msg := redactKey(le.Message, key)
	if msg == le.Message {
		return err
	}
	masked := *le
	masked.Message = msg
	return &masked
}

// minKeyPrefix is the shortest prefix of a key that redactKey masks at the end of a message.
const minKeyPrefix = 8

// redactKey returns msg with every occurrence of key replaced by "***", and a prefix of key of at
// least minKeyPrefix bytes at its end (before a clip's "...") too.
func redactKey(msg, key string) string {
	msg = strings.ReplaceAll(msg, key, "***")
	body, clipped := strings.CutSuffix(msg, "...")
	for n := min(len(key)-1, len(body)); n >= minKeyPrefix; n-- {
		if strings.HasSuffix(body, key[:n]) {
			body = body[:len(body)-n] + "***"
			if clipped {
				body += "..."
			}
			return body
		}
	}
	return msg
}

// maskedStream masks the client's key in the errors of a stream (an error object inside a 200
// stream carries the provider's message).
type maskedStream struct {
	llm.Stream
	key string
}

func (s *maskedStream) Recv() (llm.Chunk, error) {
	ch, err := s.Stream.Recv()
	if err != nil {
		err = maskKey(err, s.key)
	}
	return ch, err
}

// classify gives an error of the status and lowercase text its code.
func classify(status int, text, msg string) *llm.Error {
	code := llm.CodeServer
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		code = llm.CodeInvalidCredential
	case status == http.StatusPaymentRequired || mentionsQuota(text):
		code = llm.CodeQuota
	case status == http.StatusTooManyRequests || (status == 0 && strings.Contains(text, "rate limit")):
		code = llm.CodeRateLimit
	case mentionsContextLength(text):
		code = llm.CodeContextWindowExceeded
	case status == http.StatusRequestTimeout:
		code = llm.CodeTimeout
	}
	e := llm.NewError(code, "%s", msg)
	e.Status = status
	if code == llm.CodeServer && status != 0 && status < 500 {
		e.Retryable = false
	}
	return e
}

func mentionsQuota(s string) bool {
	return strings.Contains(s, "insufficient balance") || strings.Contains(s, "insufficient_balance") ||
		strings.Contains(s, "insufficient_quota") || strings.Contains(s, "exceeded your current quota")
}

func mentionsContextLength(s string) bool {
	for _, p := range []string{"context length", "context_length", "maximum context", "context window",
		"too many tokens", "prompt is too long", "reduce the length"} {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

// readError maps a failure to send a request or to read a body. A cancelled parent context
// gives the context error itself (context.Canceled) or, for a deadline, TIMEOUT; the idle timer
// gives TIMEOUT; anything else is TRANSPORT. A transport error's message names only the class of
// the failure ("connection refused"): the network error itself, with the endpoint's address,
// is kept in Err for the logs, not in the tenant-visible message.
func readError(parent, attempt context.Context, err error, what string) error {
	if perr := parent.Err(); perr != nil {
		if errors.Is(perr, context.DeadlineExceeded) {
			e := llm.NewError(llm.CodeTimeout, "%s: %v", what, perr)
			e.Err = perr
			return e
		}
		return perr
	}
	if errors.Is(context.Cause(attempt), errIdle) {
		e := llm.NewError(llm.CodeTimeout, "%s: %v", what, errIdle)
		e.Err = errIdle
		return e
	}
	failed := "the connection to the model endpoint failed"
	if what == whatSend {
		failed = "could not reach the model endpoint"
	}
	e := llm.NewError(llm.CodeTransport, "%s: %s (%s)", what, failed, errorClass(err))
	e.Err = err
	return e
}

// whatSend is readError's what for sending a request.
const whatSend = "send request"

// errorClass names the kind of a network failure without its addresses.
func errorClass(err error) string {
	var dns *net.DNSError
	var cert *tls.CertificateVerificationError
	var header tls.RecordHeaderError
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "host unreachable"
	case errors.As(err, &dns):
		return "DNS lookup failed"
	case errors.As(err, &cert), errors.As(err, &header):
		return "TLS error"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed"
	case errors.As(err, &ne) && ne.Timeout():
		return "network timeout"
	}
	return "network error"
}

// retryAfter parses a Retry-After header: delay seconds or an HTTP date. ok is false when the
// header is absent or unreadable.
func retryAfter(h string, now time.Time) (d time.Duration, ok bool) {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0, false
	}
	if secs, err := strconv.ParseFloat(h, 64); err == nil && secs >= 0 && secs < 1e6 {
		return time.Duration(secs * float64(time.Second)), true
	}
	t, err := http.ParseTime(h)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}
