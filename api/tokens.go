package api

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Stream tokens let a browser follow one session's event stream without holding an API key: an
// EventSource cannot send an Authorization header, and an API key is a tenant-wide secret that
// never belongs in a page. A client holding the key mints a token
// (POST /v1/sessions/{id}/stream-tokens) and hands it to the page, which opens
// GET /v1/sessions/{id}/events?token=<token> with Accept: text/event-stream.
//
// A token is read-only and session-scoped: it opens that session's event stream and nothing
// else. It is short-lived (Config.StreamTokenTTL, 5 minutes by default), checked when a stream
// opens (an open stream goes on past the expiry; a reconnect after it needs a new token). It needs
// no database row: it is `st1.<payload>.<mac>`, the payload being the tenant id, the session id
// and the expiry (Unix milliseconds), the mac an HMAC-SHA256 of "st1."+payload under the server's
// secret (Config.StreamTokenSecret, DSHD_STREAM_TOKEN_SECRET). Without a configured secret each
// process draws a random one, so replicas behind one load balancer must share a configured
// secret or refuse each other's tokens. Revoking the API key that minted a token does not revoke
// the token; it expires on its own.

// DefaultStreamTokenTTL is how long a stream token opens streams when Config.StreamTokenTTL is 0.
const DefaultStreamTokenTTL = 5 * time.Minute

const streamTokenPrefix = "st1."

type streamTokens struct {
	secret []byte
	ttl    time.Duration
	now    func() time.Time
}

func newStreamTokens(secret []byte, ttl time.Duration) *streamTokens {
	if len(secret) == 0 {
		secret = make([]byte, 32)
		_, _ = rand.Read(secret) // never fails (crypto/rand)
	}
	if ttl <= 0 {
		ttl = DefaultStreamTokenTTL
	}
	return &streamTokens{secret: secret, ttl: ttl, now: time.Now}
}

func (st *streamTokens) mac(payload string) []byte {
	m := hmac.New(sha256.New, st.secret)
	m.Write([]byte(streamTokenPrefix + payload))
	return m.Sum(nil)
}

// mint returns a token for the session of the tenant and its expiry.
func (st *streamTokens) mint(tenant, session uuid.UUID) (string, time.Time) {
	exp := st.now().Add(st.ttl).Truncate(time.Millisecond)
	var b [40]byte
	copy(b[:16], tenant[:])
	copy(b[16:32], session[:])
	binary.BigEndian.PutUint64(b[32:], uint64(exp.UnixMilli()))
	payload := base64.RawURLEncoding.EncodeToString(b[:])
	return streamTokenPrefix + payload + "." + base64.RawURLEncoding.EncodeToString(st.mac(payload)), exp
}

var (
	errTokenInvalid = errors.New("invalid stream token")
	errTokenExpired = errors.New("the stream token expired; mint a new one with POST /v1/sessions/{id}/stream-tokens")
)

// verify returns the tenant and session of a token this server (or one sharing its secret)
// minted and that has not expired.
func (st *streamTokens) verify(token string) (tenant, session uuid.UUID, err error) {
	rest, ok := strings.CutPrefix(token, streamTokenPrefix)
	payload, sig, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 || len(token) > 200 {
		return uuid.Nil, uuid.Nil, errTokenInvalid
	}
	gotMAC, err1 := base64.RawURLEncoding.DecodeString(sig)
	b, err2 := base64.RawURLEncoding.DecodeString(payload)
	if err1 != nil || err2 != nil || len(b) != 40 || !hmac.Equal(gotMAC, st.mac(payload)) {
		return uuid.Nil, uuid.Nil, errTokenInvalid
	}
	copy(tenant[:], b[:16])
	copy(session[:], b[16:32])
	if exp := int64(binary.BigEndian.Uint64(b[32:])); st.now().UnixMilli() >= exp {
		return uuid.Nil, uuid.Nil, errTokenExpired
	}
	return tenant, session, nil
}

// streamTokenAuth authenticates a request that carries ?token= instead of an API key. The token
// is removed from the request's URL first, so nothing after this point (handlers, the request
// log) can see or log it. It admits only GET /v1/sessions/{its session}/events with
// Accept: text/event-stream.
func (s *Server) streamTokenAuth(w http.ResponseWriter, r *http.Request, next http.Handler) {
	q := r.URL.Query()
	token := q.Get("token")
	q.Del("token")
	r.URL.RawQuery = q.Encode()
	refuse := func(detail string) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="dshd", error="invalid_token"`)
		writeProblem(w, CodeUnauthorized, detail)
	}
	tenant, session, err := s.tokens.verify(token)
	if err != nil {
		refuse(err.Error())
		return
	}
	path := r.URL.Path
	rest, isSession := strings.CutPrefix(path, "/v1/sessions/")
	id, isEvents := strings.CutSuffix(rest, "/events")
	if r.Method != http.MethodGet || !isSession || !isEvents || !acceptsEventStream(r) {
		refuse("a stream token only opens its session's event stream (GET /v1/sessions/{id}/events with Accept: text/event-stream); everything else takes an API key")
		return
	}
	if pathID, err := uuid.Parse(id); err != nil || pathID != session {
		refuse("the stream token is for another session")
		return
	}
	info(r).tenant = tenant
	next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tenantKey{}, tenant)))
}

type streamTokenJSON struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expiresAt"`
	StreamURL string    `json:"streamUrl"`
}

// handleStreamTokenCreate mints a stream token for the session: 201 {token, expiresAt, streamUrl}.
// It takes an API key (a stream token cannot mint another).
func (rs sessionResource) handleStreamTokenCreate(w http.ResponseWriter, r *http.Request) {
	id, err := rs.sessionID(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if _, err := rs.s.cfg.Log.SessionGet(r.Context(), tenantID(r), id); err != nil {
		writeError(w, r, err)
		return
	}
	token, exp := rs.s.tokens.mint(tenantID(r), id)
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, streamTokenJSON{Token: token, ExpiresAt: exp.UTC(),
		StreamURL: "/v1/sessions/" + id.String() + "/events?token=" + url.QueryEscape(token)})
}
