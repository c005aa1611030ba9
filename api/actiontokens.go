package api

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	tenantpkg "github.com/dshd/dshd/pkg/tenant"
)

// Action tokens let a page act in one session without an API key, so that a browser can run a
// chat end to end with no proxy of its own. A backend holding a key with the write scope mints
// one (POST /v1/sessions/{id}/action-tokens) with a subset of four actions and hands it to the
// page, which sends it as `Authorization: Bearer <token>` (or, to open the event stream from an
// EventSource, as ?token=).
//
// Every action token reads its session (the session, its event page and stream); each action
// adds routes of that session (actionRoutes):
//
//	post          POST messages, POST messages/stream
//	approve       GET approvals, POST approvals/{approvalId}
//	cancel        POST cancel
//	tool-results  GET tool-results, POST tool-results
//
// Any other route, another session's routes included, answers 403 insufficient_scope. A token
// is never a tenant-wide power: it cannot mint tokens, read another session or list anything.
//
// Like a stream token (tokens.go) it needs no row of its own: `at1.<payload>.<mac>`, the payload
// being the tenant id, the session id, the expiry (Unix ms), the id and first 8 hash bytes of
// the API key that minted it, and the actions as a bit set; the mac an HMAC-SHA256 of
// "at1."+payload under the stream tokens' secret (DSHD_STREAM_TOKEN_SECRET and its former
// secrets), so a stream token and an action token can never pass for each other. Its lifetime is
// at most the stream tokens' (DSHD_STREAM_TOKEN_TTL), shorter when the minting asks; like a
// stream token's, its expiry bounds when it opens a stream, and an open stream goes on. It
// authenticates only while the key that minted it does: revoking the key (or a parent of it,
// which revokes its children) or rotating it ends the token's power at the next request, and a
// stream it opened within a heartbeat. The token is removed from a request's URL before anything
// can log it.

const actionTokenPrefix = "at1."

// The actions of an action token, as bits of its payload.
const (
	actionPost uint8 = 1 << iota
	actionApprove
	actionCancel
	actionToolResults
)

// action is an action's name in the API and its bit.
type action struct {
	name string
	bit  uint8
}

// actionNames are the actions in the order the API lists them.
var actionNames = []action{{"post", actionPost}, {"approve", actionApprove}, {"cancel", actionCancel}, {"tool-results", actionToolResults}}

// actionRoutes are the routes an action token reaches (chi patterns under /v1/sessions/{id}),
// with the action each needs; 0 is reading, which every action token may.
var actionRoutes = map[string]uint8{
	"GET /v1/sessions/{id}":                         0,
	"GET /v1/sessions/{id}/events":                  0,
	"GET /v1/sessions/{id}/events/stream":           0,
	"POST /v1/sessions/{id}/messages":               actionPost,
	"POST /v1/sessions/{id}/messages/stream":        actionPost,
	"GET /v1/sessions/{id}/approvals":               actionApprove,
	"POST /v1/sessions/{id}/approvals/{approvalId}": actionApprove,
	"POST /v1/sessions/{id}/cancel":                 actionCancel,
	"GET /v1/sessions/{id}/tool-results":            actionToolResults,
	"POST /v1/sessions/{id}/tool-results":           actionToolResults,
}

// actionClaims is what an action token says.
type actionClaims struct {
	tokenClaims
	actions uint8
}

// mintAction returns an action token for the session of the tenant with the actions, minted by
// the key (id and hash), valid for ttl (at most the stream tokens' TTL), and its expiry.
func (st *streamTokens) mintAction(c actionClaims, ttl time.Duration) (string, time.Time) {
	if ttl <= 0 || ttl > st.ttl {
		ttl = st.ttl
	}
	exp := st.now().Add(ttl).Truncate(time.Millisecond)
	return st.seal(actionTokenPrefix, c.tokenClaims, exp, c.actions), exp
}

var (
	errActionTokenInvalid = errors.New("invalid action token")
	errActionTokenExpired = errors.New("the action token expired; ask the backend for a new one (POST /v1/sessions/{id}/action-tokens)")
)

// verifyAction returns the claims of an action token this server (or one sharing its secret)
// minted and that has not expired.
func (st *streamTokens) verifyAction(token string) (actionClaims, error) {
	c, extra, err := st.open(actionTokenPrefix, token, 1, errActionTokenInvalid, errActionTokenExpired)
	if err != nil {
		return actionClaims{}, err
	}
	return actionClaims{tokenClaims: c, actions: extra[0]}, nil
}

// routePattern is the chi pattern of the route r reaches ("" when none does).
func (s *Server) routePattern(r *http.Request) string {
	path := r.URL.RawPath // as chi routes it: the escaped path when it has one
	if path == "" {
		path = r.URL.Path
	}
	return metricsRoute(s.router.Find(chi.NewRouteContext(), r.Method, path))
}

// actionTokenAuth authenticates a request that carries an action token, from its Authorization
// header or, inURL, from ?token= (already removed from the URL), which opens only the event
// stream.
func (s *Server) actionTokenAuth(w http.ResponseWriter, r *http.Request, next http.Handler, token string, inURL bool) {
	claims, err := s.tokens.verifyAction(token)
	if err != nil {
		w.Header().Set("WWW-Authenticate", `Bearer realm="dshd", error="invalid_token"`)
		writeProblem(w, CodeUnauthorized, err.Error())
		return
	}
	refuse := func(detail string) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="dshd", error="insufficient_scope"`)
		writeProblem(w, CodeInsufficientScope, detail)
	}
	pattern := r.Method + " " + s.routePattern(r)
	need, ok := actionRoutes[pattern]
	switch {
	case !ok:
		refuse("an action token reaches only its session's routes of the actions it was granted (the README's From a browser); " +
			r.Method + " " + r.URL.Path + " takes an API key")
		return
	case inURL && pattern != "GET /v1/sessions/{id}/events/stream" && (pattern != "GET /v1/sessions/{id}/events" || !acceptsEventStream(r)):
		refuse("an action token in ?token= only opens its session's event stream; send it as Authorization: Bearer <token>")
		return
	case need&claims.actions != need:
		refuse("the action token was not granted " + actionName(need) + ", which " + r.Method + " " + r.URL.Path + " needs")
		return
	}
	rest, _ := strings.CutPrefix(r.URL.Path, "/v1/sessions/")
	id, _, _ := strings.Cut(rest, "/")
	if pathID, err := uuid.Parse(id); err != nil || pathID != claims.session {
		refuse("the action token is for another session")
		return
	}
	check := func(ctx context.Context) error {
		return s.cfg.Tenants.KeyActive(ctx, claims.tenant, claims.key, claims.keyHash)
	}
	if err := check(r.Context()); errors.Is(err, tenantpkg.ErrNotFound) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="dshd", error="invalid_token"`)
		writeProblem(w, CodeUnauthorized, "the API key that minted the action token was revoked, rotated or has expired")
		return
	} else if err != nil {
		writeError(w, r, err)
		return
	}
	info(r).tenant = claims.tenant
	info(r).authenticated()
	ctx := context.WithValue(r.Context(), apiKeyCtx{}, &authKey{check: check})
	next.ServeHTTP(w, r.WithContext(context.WithValue(ctx, tenantKey{}, claims.tenant)))
}

func actionName(bit uint8) string {
	for _, a := range actionNames {
		if a.bit == bit {
			return a.name
		}
	}
	return "reading"
}

type actionTokenRequest struct {
	// Scopes are the actions granted: a non-empty subset of post, approve, cancel, tool-results.
	Scopes []string `json:"scopes"`
	// TTLSeconds shortens the token's life below the server's DSHD_STREAM_TOKEN_TTL (0: that).
	TTLSeconds int64 `json:"ttlSeconds,omitempty"`
}

type actionTokenJSON struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expiresAt"`
	SessionID uuid.UUID `json:"sessionId"`
	Scopes    []string  `json:"scopes"`
}

// handleActionTokenCreate mints an action token for the session: 201 {token, expiresAt,
// sessionId, scopes}. It takes an API key with the write scope (no token mints another). An
// Idempotency-Key makes it safe to retry; a replay answers without the token (idempotency.go).
func (rs sessionResource) handleActionTokenCreate(w http.ResponseWriter, r *http.Request) {
	idempotentCreate(w, r, rs.s.cfg.Log.Creates(), callerScope(r), idemRouteActionToken,
		[]string{"token"}, rs.createActionToken)
}

func (rs sessionResource) createActionToken(w http.ResponseWriter, r *http.Request) {
	id, err := rs.sessionID(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	var req actionTokenRequest
	if err := decodeJSON(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	var bits uint8
	for i, name := range req.Scopes {
		j := slices.IndexFunc(actionNames, func(a action) bool { return a.name == name })
		if j < 0 {
			writeError(w, r, fieldError("/scopes/"+strconv.Itoa(i), "scopes may hold post, approve, cancel and tool-results, not "+strconv.Quote(name)))
			return
		}
		bits |= actionNames[j].bit
	}
	var scopes []string
	for _, a := range actionNames {
		if bits&a.bit != 0 {
			scopes = append(scopes, a.name)
		}
	}
	if bits == 0 {
		writeError(w, r, fieldError("/scopes", "scopes must name at least one of post, approve, cancel and tool-results"))
		return
	}
	maxTTL := rs.s.tokens.ttl
	if req.TTLSeconds < 0 || req.TTLSeconds > int64(maxTTL/time.Second) { // compared in seconds: no overflow
		writeError(w, r, fieldError("/ttlSeconds", "ttlSeconds must be 1 to "+strconv.Itoa(int(maxTTL/time.Second))+" (the server's DSHD_STREAM_TOKEN_TTL), or 0 for that"))
		return
	}
	c, ok := rs.minter(w, r, id, "an action token")
	if !ok {
		return
	}
	token, exp := rs.s.tokens.mintAction(actionClaims{tokenClaims: c, actions: bits}, time.Duration(req.TTLSeconds)*time.Second)
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, actionTokenJSON{Token: token, ExpiresAt: exp.UTC(), SessionID: id, Scopes: scopes})
}
