package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/api"
)

type actionTokenJSON struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expiresAt"`
	SessionID string    `json:"sessionId"`
	Scopes    []string  `json:"scopes"`
}

// mintAction mints an action token for the session with key.
func (r *replica) mintAction(t *testing.T, key, sid, body string) actionTokenJSON {
	t.Helper()
	var tok actionTokenJSON
	res := r.do(t, "POST", "/v1/sessions/"+sid+"/action-tokens", key, body).want(t, http.StatusCreated)
	res.json(t, &tok)
	if tok.Token == "" || !strings.HasPrefix(tok.Token, "at1.") || tok.SessionID != sid || res.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("minted %+v (Cache-Control %q)", tok, res.header.Get("Cache-Control"))
	}
	return tok
}

// TestActionTokensRunAChat: with nothing but an action token, a page reads its session, posts a
// message and follows its stream, answers the approval the turn asks, and cancels a later turn.
func TestActionTokensRunAChat(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sid := e.sessionOfPreset(t, e.keyA, askEchoPreset)
	tok := e.mintAction(t, e.keyA, sid, `{"scopes":["cancel","post","approve","post"]}`)
	if strings.Join(tok.Scopes, ",") != "post,approve,cancel" {
		t.Fatalf("scopes %v, want post,approve,cancel", tok.Scopes)
	}
	if d := time.Until(tok.ExpiresAt); d <= 0 || d > api.DefaultStreamTokenTTL {
		t.Fatalf("expires in %v, want within the stream tokens' TTL", d)
	}
	at := tok.Token
	e.do(t, "GET", "/v1/sessions/"+sid, at, nil).want(t, http.StatusOK)
	e.do(t, "GET", "/v1/sessions/"+sid+"/events", at, nil).want(t, http.StatusOK)

	s := postStreamTo(t, e.replica, "/v1/sessions/"+sid+"/messages/stream", at, `{"content":"tool:echo args:{\"text\":\"ok\"}"}`)
	asked, _ := untilAsked(t, s)
	var list struct{ Items []struct{ ID string } }
	e.do(t, "GET", "/v1/sessions/"+sid+"/approvals", at, nil).want(t, http.StatusOK).json(t, &list)
	if len(list.Items) != 1 || list.Items[0].ID != asked.ID {
		t.Fatalf("pending %+v, want %s", list, asked.ID)
	}
	e.do(t, "POST", "/v1/sessions/"+sid+"/approvals/"+asked.ID, at, map[string]string{"outcome": "allowed-once"}).want(t, http.StatusOK)
	rest := s.untilEnd(t)
	if last := rest[len(rest)-1]; last.Type != "turn/end" || !strings.Contains(string(last.Data), "completed") {
		t.Fatalf("the turn ended %s", last.Data)
	}

	// An EventSource sends it in the URL: there it opens the event stream and nothing else.
	resp := get(t, e.url+"/v1/sessions/"+sid+"/events?token="+at, "Accept", "text/event-stream")
	if resp.StatusCode != http.StatusOK {
		finished(t, resp).want(t, http.StatusOK)
	}
	resp.Body.Close()
	for _, path := range []string{"/approvals", "", "/events"} { // the last without Accept: text/event-stream
		finished(t, get(t, e.url+"/v1/sessions/"+sid+path+"?token="+at)).wantProblem(t, http.StatusForbidden, api.CodeInsufficientScope)
	}

	// A turn that sleeps is cancelled with the token.
	s = postStreamTo(t, e.replica, "/v1/sessions/"+sid+"/messages/stream", at, `{"content":"tool:sleep args:{\"ms\":60000}"}`)
	for {
		var ev struct{ Type string }
		if err := json.Unmarshal([]byte(s.next(t).data), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Type == "tool/call" {
			break
		}
	}
	var cancelled struct{ Cancelled bool }
	e.do(t, "POST", "/v1/sessions/"+sid+"/cancel", at, `{}`).want(t, http.StatusOK).json(t, &cancelled)
	if !cancelled.Cancelled {
		t.Fatal("the cancel cancelled nothing")
	}
	rest = s.untilEnd(t)
	if last := rest[len(rest)-1]; last.Type != "turn/end" || !strings.Contains(string(last.Data), "aborted") {
		t.Fatalf("the cancelled turn ended %s", last.Data)
	}
}

// TestActionTokensStayInTheirGrant: an action token reaches only its session's routes of the
// actions it was granted; it is refused for another session, another tenant's session, a scope
// not granted, any route beside its session's, after its expiry, altered, and once the key that
// minted it or that key's parent is revoked. Minting wants a write key and a valid grant.
func TestActionTokensStayInTheirGrant(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sid := e.sessionCreate(t, e.keyA).String()
	other := e.sessionCreate(t, e.keyA).String()
	theirs := e.sessionCreate(t, e.keyB).String()
	postOnly := e.mintAction(t, e.keyA, sid, `{"scopes":["post"]}`).Token
	forbidden := func(method, path, token string, body any) {
		t.Helper()
		res := e.do(t, method, path, token, body)
		res.wantProblem(t, http.StatusForbidden, api.CodeInsufficientScope)
		if !strings.Contains(res.header.Get("WWW-Authenticate"), "insufficient_scope") {
			t.Errorf("%s %s: WWW-Authenticate %q", method, path, res.header.Get("WWW-Authenticate"))
		}
	}
	unauthorized := func(token, detail string) {
		t.Helper()
		p := e.do(t, "GET", "/v1/sessions/"+sid, token, nil).wantProblem(t, http.StatusUnauthorized, api.CodeUnauthorized)
		if !strings.Contains(p.Detail, detail) {
			t.Errorf("detail %q, want %q in it", p.Detail, detail)
		}
	}

	// Scopes not granted.
	e.do(t, "GET", "/v1/sessions/"+sid, postOnly, nil).want(t, http.StatusOK)
	forbidden("POST", "/v1/sessions/"+sid+"/cancel", postOnly, `{}`)
	forbidden("GET", "/v1/sessions/"+sid+"/approvals", postOnly, nil)
	forbidden("POST", "/v1/sessions/"+sid+"/approvals/a1", postOnly, `{"outcome":"allowed-once"}`)
	forbidden("GET", "/v1/sessions/"+sid+"/tool-results", postOnly, nil)
	forbidden("POST", "/v1/sessions/"+sid+"/tool-results", postOnly, `{"callId":"c1","content":"x"}`)
	results := e.mintAction(t, e.keyA, sid, `{"scopes":["tool-results"]}`).Token
	e.do(t, "GET", "/v1/sessions/"+sid+"/tool-results", results, nil).want(t, http.StatusOK)
	forbidden("POST", "/v1/sessions/"+sid+"/messages", results, `{"content":"hi"}`)

	// Routes beside the session's own: never a tenant-wide power.
	for _, r := range []struct{ method, path string }{
		{"GET", "/v1/sessions"}, {"POST", "/v1/sessions"}, {"DELETE", "/v1/sessions/" + sid},
		{"GET", "/v1/sessions/" + sid + "/history"}, {"GET", "/v1/sessions/" + sid + "/export"},
		{"POST", "/v1/sessions/" + sid + "/stream-tokens"}, {"POST", "/v1/sessions/" + sid + "/action-tokens"},
		{"PUT", "/v1/sessions/" + sid + "/approval-policy"}, {"GET", "/v1/presets"}, {"GET", "/v1/api-keys"},
		{"GET", "/v1/usage"},
	} {
		forbidden(r.method, r.path, postOnly, nil)
	}

	// Another session of the tenant, and another tenant's session.
	forbidden("GET", "/v1/sessions/"+other, postOnly, nil)
	forbidden("POST", "/v1/sessions/"+other+"/messages", postOnly, `{"content":"hi"}`)
	forbidden("GET", "/v1/sessions/"+theirs, postOnly, nil)
	theirToken := e.mintAction(t, e.keyB, theirs, `{"scopes":["post"]}`).Token
	forbidden("GET", "/v1/sessions/"+sid, theirToken, nil)
	e.do(t, "POST", "/v1/sessions/"+theirs+"/action-tokens", e.keyA, `{"scopes":["post"]}`).wantProblem(t, http.StatusNotFound, api.CodeNotFound)

	// Altered, expired.
	unauthorized(postOnly[:len(postOnly)-2]+"AA", "invalid action token")
	unauthorized("at1.x.y", "invalid action token")
	short := e.mintAction(t, e.keyA, sid, `{"scopes":["post"],"ttlSeconds":1}`)
	if d := time.Until(short.ExpiresAt); d > time.Second {
		t.Fatalf("ttlSeconds 1 expires in %v", d)
	}
	time.Sleep(time.Until(short.ExpiresAt) + 50*time.Millisecond)
	unauthorized(short.Token, "expired")

	// The minting key revoked, and a parent of the minting key revoked.
	k := e.mintKey(t, e.keyA, "minter")
	byKey := e.mintAction(t, k.Secret, sid, `{"scopes":["post"]}`).Token
	e.do(t, "GET", "/v1/sessions/"+sid, byKey, nil).want(t, http.StatusOK)
	e.do(t, "DELETE", "/v1/api-keys/"+k.ID, e.keyA, nil).want(t, http.StatusNoContent)
	unauthorized(byKey, "revoked")
	parent := e.mintKey(t, e.keyA, "parent")
	child := e.mintKey(t, parent.Secret, "child")
	byChild := e.mintAction(t, child.Secret, sid, `{"scopes":["post","cancel"]}`).Token
	e.do(t, "GET", "/v1/sessions/"+sid, byChild, nil).want(t, http.StatusOK)
	e.do(t, "DELETE", "/v1/api-keys/"+parent.ID, e.keyA, nil).want(t, http.StatusNoContent)
	unauthorized(byChild, "revoked")
	e.do(t, "POST", "/v1/sessions/"+sid+"/cancel", byChild, `{}`).wantProblem(t, http.StatusUnauthorized, api.CodeUnauthorized)

	// An idempotent retry of a mint answers the first answer without its secret.
	first := e.do(t, "POST", "/v1/sessions/"+sid+"/action-tokens", e.keyA, `{"scopes":["post"]}`, "Idempotency-Key", "mint-1").want(t, http.StatusCreated)
	again := e.do(t, "POST", "/v1/sessions/"+sid+"/action-tokens", e.keyA, `{"scopes":["post"]}`, "Idempotency-Key", "mint-1").want(t, http.StatusCreated)
	var one, two actionTokenJSON
	first.json(t, &one)
	again.json(t, &two)
	if one.Token == "" || two.Token != "" || again.header.Get("Idempotent-Replayed") != "true" || !two.ExpiresAt.Equal(one.ExpiresAt) {
		t.Fatalf("replay %+v (header %q) of %+v", two, again.header.Get("Idempotent-Replayed"), one)
	}

	// Minting: a read-only key may not, and the grant must be valid.
	var ro keyJSON
	e.do(t, "POST", "/v1/api-keys", e.keyA, `{"name":"ro","scopes":["read"]}`).want(t, http.StatusCreated).json(t, &ro)
	e.do(t, "POST", "/v1/sessions/"+sid+"/action-tokens", ro.Secret, `{"scopes":["post"]}`).wantProblem(t, http.StatusForbidden, api.CodeInsufficientScope)
	for body, pointer := range map[string]string{
		`{"scopes":[]}`:                               "/scopes",
		`{"scopes":["post","admin"]}`:                 "/scopes/1",
		`{"scopes":["post"],"ttlSeconds":-1}`:         "/ttlSeconds",
		`{"scopes":["post"],"ttlSeconds":3601}`:       "/ttlSeconds",
		`{"scopes":["post"],"ttlSeconds":9223372037}`: "/ttlSeconds", // wrapped to a negative Duration once
	} {
		p := e.do(t, "POST", "/v1/sessions/"+sid+"/action-tokens", e.keyA, body).wantProblem(t, http.StatusBadRequest, api.CodeInvalidRequest)
		if len(p.Errors) != 1 || p.Errors[0].Pointer != pointer {
			b, _ := json.Marshal(p)
			t.Errorf("%s: %s, want one error at %s", body, b, pointer)
		}
	}
}
