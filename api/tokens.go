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

	tenantpkg "github.com/dshd/dshd/pkg/tenant"
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
// no database row of its own: it is `st2.<payload>.<mac>`, the payload being the tenant id, the
// session id, the expiry (Unix milliseconds), the id of the API key that minted it and the first
// 8 bytes of that key's hash, the mac an HMAC-SHA256 of "st2."+payload under the server's secret
// (Config.StreamTokenSecret, DSHD_STREAM_TOKEN_SECRET). Without a configured secret each process
// draws a random one, so replicas behind one load balancer must share a configured secret or
// refuse each other's tokens. For a rotation, former secrets
// (Config.StreamTokenPreviousSecrets, DSHD_STREAM_TOKEN_SECRET_PREVIOUS) still verify tokens
// they signed; a token is only ever signed with the current secret.
//
// A token is worth no more than the key that minted it: it opens a stream only while that key
// still authenticates (not revoked, not rotated, not expired), and a stream it opened ends within
// a heartbeat once the key no longer does, like a stream opened with the key itself. Tokens of
// the former format, `st1.`, which name no key, are refused like any invalid token.

// DefaultStreamTokenTTL is how long a stream token opens streams when Config.StreamTokenTTL is 0.
const DefaultStreamTokenTTL = 5 * time.Minute

const streamTokenPrefix = "st2."

// tokenKeyHashBytes is how much of the minting key's hash a token carries: enough to tell a
// rotated key from the one that minted the token.
const tokenKeyHashBytes = 8

// streamTokens mints and verifies stream tokens. It is safe for concurrent use (it never changes
// after newStreamTokens).
type streamTokens struct {
	secret   []byte   // signs new tokens, and verifies
	previous [][]byte // only verify (a rotation's former secrets)
	ttl      time.Duration
	now      func() time.Time
}

// newStreamTokens returns tokens signed with secret (a random one when empty) and verified with
// it or any of previous (empty entries are skipped).
func newStreamTokens(secret []byte, previous [][]byte, ttl time.Duration) *streamTokens {
	if len(secret) == 0 {
		secret = make([]byte, 32)
		_, _ = rand.Read(secret) // never fails (crypto/rand)
	}
	if ttl <= 0 {
		ttl = DefaultStreamTokenTTL
	}
	st := &streamTokens{secret: secret, ttl: ttl, now: time.Now}
	for _, p := range previous {
		if len(p) > 0 {
			st.previous = append(st.previous, p)
		}
	}
	return st
}

func mac(secret []byte, prefix, payload string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(prefix + payload))
	return m.Sum(nil)
}

// signedBy reports whether got is the mac of prefix+payload under the current secret or a
// previous one. Every secret is tried, so the time taken does not tell which one matched.
func (st *streamTokens) signedBy(got []byte, prefix, payload string) bool {
	ok := hmac.Equal(got, mac(st.secret, prefix, payload))
	for _, p := range st.previous {
		ok = hmac.Equal(got, mac(p, prefix, payload)) || ok
	}
	return ok
}

// tokenClaims is what a stream token says: whose session it opens, and which API key minted it.
type tokenClaims struct {
	tenant, session uuid.UUID
	key             uuid.UUID
	keyHash         []byte // the first tokenKeyHashBytes of the key's hash
}

// claimBytes is the length of the claims' part of a payload: tenant, session, expiry, key id,
// key hash prefix.
const claimBytes = 64

// seal returns the token of prefix whose payload is the claims, expiring at exp, then extra
// bytes: prefix, the payload in base64url, a dot, and the payload's mac.
func (st *streamTokens) seal(prefix string, c tokenClaims, exp time.Time, extra ...byte) string {
	b := make([]byte, claimBytes, claimBytes+len(extra))
	copy(b[:16], c.tenant[:])
	copy(b[16:32], c.session[:])
	binary.BigEndian.PutUint64(b[32:40], uint64(exp.UnixMilli()))
	copy(b[40:56], c.key[:])
	copy(b[56:64], c.keyHash)
	payload := base64.RawURLEncoding.EncodeToString(append(b, extra...))
	return prefix + payload + "." + base64.RawURLEncoding.EncodeToString(mac(st.secret, prefix, payload))
}

// open returns the claims and the extra bytes (extra of them) of a token of prefix sealed by
// this server (or one sharing its secret): invalid when it is not one, expired when it is but
// its expiry has passed.
func (st *streamTokens) open(prefix, token string, extra int, invalid, expired error) (tokenClaims, []byte, error) {
	rest, ok := strings.CutPrefix(token, prefix)
	payload, sig, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 || len(token) > 200 {
		return tokenClaims{}, nil, invalid
	}
	gotMAC, err1 := base64.RawURLEncoding.DecodeString(sig)
	b, err2 := base64.RawURLEncoding.DecodeString(payload)
	if err1 != nil || err2 != nil || len(b) != claimBytes+extra || !st.signedBy(gotMAC, prefix, payload) {
		return tokenClaims{}, nil, invalid
	}
	if exp := int64(binary.BigEndian.Uint64(b[32:40])); st.now().UnixMilli() >= exp {
		return tokenClaims{}, nil, expired
	}
	var c tokenClaims
	copy(c.tenant[:], b[:16])
	copy(c.session[:], b[16:32])
	copy(c.key[:], b[40:56])
	c.keyHash = b[56:64]
	return c, b[claimBytes:], nil
}

// mint returns a token for the session of the tenant, minted by the key (id and hash), and its
// expiry.
func (st *streamTokens) mint(tenant, session, key uuid.UUID, keyHash []byte) (string, time.Time) {
	exp := st.now().Add(st.ttl).Truncate(time.Millisecond)
	return st.seal(streamTokenPrefix, tokenClaims{tenant: tenant, session: session, key: key, keyHash: keyHash}, exp), exp
}

var (
	errTokenInvalid = errors.New("invalid stream token")
	errTokenExpired = errors.New("the stream token expired; mint a new one with POST /v1/sessions/{id}/stream-tokens")
)

// verify returns the claims of a token this server (or one sharing its secret) minted and that
// has not expired.
func (st *streamTokens) verify(token string) (tokenClaims, error) {
	c, _, err := st.open(streamTokenPrefix, token, 0, errTokenInvalid, errTokenExpired)
	return c, err
}

// streamTokenAuth authenticates a request that carries ?token= instead of an API key. The token
// is removed from the request's URL first, so nothing after this point (handlers, the request
// log) can see or log it. It admits only GET /v1/sessions/{its session}/events/stream, and its
// alias .../events with Accept: text/event-stream.
func (s *Server) streamTokenAuth(w http.ResponseWriter, r *http.Request, next http.Handler) {
	q := r.URL.Query()
	token := q.Get("token")
	q.Del("token")
	r.URL.RawQuery = q.Encode()
	if strings.HasPrefix(token, actionTokenPrefix) {
		s.actionTokenAuth(w, r, next, token, true) // actiontokens.go
		return
	}
	refuse := func(detail string) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="dshd", error="invalid_token"`)
		writeProblem(w, CodeUnauthorized, detail)
	}
	claims, err := s.tokens.verify(token)
	if err != nil {
		refuse(err.Error())
		return
	}
	tenant, session := claims.tenant, claims.session
	path := r.URL.Path
	rest, isSession := strings.CutPrefix(path, "/v1/sessions/")
	id, isStream := strings.CutSuffix(rest, "/events/stream")
	if !isStream {
		var isEvents bool
		id, isEvents = strings.CutSuffix(rest, "/events")
		isStream = isEvents && acceptsEventStream(r)
	}
	if r.Method != http.MethodGet || !isSession || !isStream {
		refuse("a stream token only opens its session's event stream (GET /v1/sessions/{id}/events/stream, or .../events with Accept: text/event-stream); everything else takes an API key")
		return
	}
	if pathID, err := uuid.Parse(id); err != nil || pathID != session {
		refuse("the stream token is for another session")
		return
	}
	check := func(ctx context.Context) error {
		return s.cfg.Tenants.KeyActive(ctx, tenant, claims.key, claims.keyHash)
	}
	if err := check(r.Context()); errors.Is(err, tenantpkg.ErrNotFound) {
		refuse("the API key that minted the stream token was revoked, rotated or has expired")
		return
	} else if err != nil {
		writeError(w, r, err)
		return
	}
	ctx := context.WithValue(r.Context(), apiKeyCtx{}, &authKey{check: check})
	info(r).tenant = tenant
	next.ServeHTTP(w, r.WithContext(context.WithValue(ctx, tenantKey{}, tenant)))
}

type streamTokenJSON struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expiresAt"`
	StreamURL string    `json:"streamUrl"`
}

// handleStreamTokenCreate mints a stream token for the session: 201 {token, expiresAt, streamUrl}.
// It takes an API key (a stream token cannot mint another). An Idempotency-Key makes it safe to
// retry; a replay answers expiresAt without the token and its streamUrl (idempotency.go).
func (rs sessionResource) handleStreamTokenCreate(w http.ResponseWriter, r *http.Request) {
	idempotentCreate(w, r, rs.s.cfg.Log.Creates(), callerScope(r), idemRouteStreamToken,
		[]string{"token", "streamUrl"}, rs.createStreamToken)
}

// minter returns the claims of a token of the session that the request's API key mints, or
// answers why there is none: the session is not the tenant's (404), or no API key authenticated
// the request (a token cannot mint a token).
func (rs sessionResource) minter(w http.ResponseWriter, r *http.Request, session uuid.UUID, what string) (tokenClaims, bool) {
	if _, err := rs.s.cfg.Log.SessionGet(r.Context(), tenantID(r), session); err != nil {
		writeError(w, r, err)
		return tokenClaims{}, false
	}
	a, ok := r.Context().Value(apiKeyCtx{}).(*authKey)
	if !ok || a.hash == nil {
		writeProblem(w, CodeUnauthorized, what+" is minted with an API key")
		return tokenClaims{}, false
	}
	return tokenClaims{tenant: tenantID(r), session: session, key: a.key.ID, keyHash: a.hash[:tokenKeyHashBytes]}, true
}

func (rs sessionResource) createStreamToken(w http.ResponseWriter, r *http.Request) {
	id, err := rs.sessionID(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	c, ok := rs.minter(w, r, id, "a stream token")
	if !ok {
		return
	}
	token, exp := rs.s.tokens.mint(c.tenant, c.session, c.key, c.keyHash)
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, streamTokenJSON{Token: token, ExpiresAt: exp.UTC(),
		StreamURL: "/v1/sessions/" + id.String() + "/events?token=" + url.QueryEscape(token)})
}
