package api_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/api"
)

// tokenProblem opens the session's event stream with token and returns the refusal's status,
// WWW-Authenticate header and problem document.
func tokenProblem(t *testing.T, r *replica, sid uuid.UUID, token string) (string, api.Problem) {
	t.Helper()
	resp := get(t, r.url+"/v1/sessions/"+sid.String()+"/events?token="+token, "Accept", "text/event-stream")
	if resp.StatusCode == 200 {
		resp.Body.Close() // an open stream: do not wait for its end
		t.Fatalf("the token opened the stream")
	}
	res := finished(t, resp)
	p := res.wantProblem(t, 401, api.CodeUnauthorized)
	return res.header.Get("WWW-Authenticate"), p
}

// v1Token is a stream token of the former format (`st1.`): tenant, session and expiry, no key,
// signed with secret as servers before issue 17 signed them.
func v1Token(secret []byte, tenant, session uuid.UUID, exp time.Time) string {
	var b [40]byte
	copy(b[:16], tenant[:])
	copy(b[16:32], session[:])
	binary.BigEndian.PutUint64(b[32:40], uint64(exp.UnixMilli()))
	payload := base64.RawURLEncoding.EncodeToString(b[:])
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("st1." + payload))
	return "st1." + payload + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// TestStreamTokenV1Refused (issue 17, finding 1): a stream token of the former `st1.` format names
// no API key, so it opened a stream whatever became of the key of whoever minted it (and, signed
// with a leaked secret, for anyone). A well-signed, unexpired st1 token now answers 401 with the
// same problem document and header as any invalid token.
func TestStreamTokenV1Refused(t *testing.T) {
	t.Parallel()
	secret := []byte(strings.Repeat("v", 32))
	e := newEnv(t, func(c *api.Config) { c.StreamTokenSecret = secret })
	sid := e.sessionCreate(t, e.keyA)
	tokenStream(t, e.replica, sid, e.streamToken(t, e.keyA, sid)) // a token of this server opens the stream

	v1 := v1Token(secret, e.tenantA, sid, time.Now().Add(time.Hour))
	gotHeader, got := tokenProblem(t, e.replica, sid, v1)
	wantHeader, want := tokenProblem(t, e.replica, sid, "st2.garbage.garbage")
	if !reflect.DeepEqual(got, want) || gotHeader != wantHeader {
		t.Fatalf("st1 token: %q %+v; an invalid token: %q %+v", gotHeader, got, wantHeader, want)
	}
}

// TestStreamTokenSecretOverlapRotation (issue 17, finding 1: the stream-token secret was exposed
// and must be rotated without refusing every open page's token at once): a server lists the
// former secret in StreamTokenPreviousSecrets (DSHD_STREAM_TOKEN_SECRET_PREVIOUS) and accepts
// tokens it signed while it is listed, refuses them once it is dropped, and signs new tokens with
// the current secret only (a server that has only the old secret refuses them).
func TestStreamTokenSecretOverlapRotation(t *testing.T) {
	t.Parallel()
	oldSecret, newSecret := []byte(strings.Repeat("o", 32)), []byte(strings.Repeat("n", 32))
	e := newEnv(t, func(c *api.Config) { c.StreamTokenSecret = oldSecret })
	rotating := e.newReplica(func(c *api.Config) {
		c.StreamTokenSecret, c.StreamTokenPreviousSecrets = newSecret, [][]byte{oldSecret}
	})
	rotated := e.newReplica(func(c *api.Config) { c.StreamTokenSecret = newSecret })
	sid := e.sessionCreate(t, e.keyA)

	oldToken := e.streamToken(t, e.keyA, sid)
	tokenStream(t, rotating, sid, oldToken)
	if _, p := tokenProblem(t, rotated, sid, oldToken); !strings.Contains(p.Detail, "invalid stream token") {
		t.Fatalf("old token on a server without the old secret: %+v", p)
	}

	newToken := rotating.streamToken(t, e.keyA, sid)
	tokenStream(t, rotating, sid, newToken)
	tokenStream(t, rotated, sid, newToken)
	if _, p := tokenProblem(t, e.replica, sid, newToken); !strings.Contains(p.Detail, "invalid stream token") {
		t.Fatalf("new token on a server with the old secret only: %+v", p)
	}
}

// TestAdminTokenOverlapRotation (issue 17, finding 1: the admin token was exposed and must be
// rotated): a server lists the former token in AdminTokenPrevious (DSHD_ADMIN_TOKEN_PREVIOUS) and
// accepts both while it is listed; once it is dropped only the new one is accepted.
func TestAdminTokenOverlapRotation(t *testing.T) {
	t.Parallel()
	const newToken = "new-admin-token"
	e := newEnv(t)
	rotating := e.newReplica(func(c *api.Config) {
		c.AdminToken, c.AdminTokenPrevious = newToken, []string{"older-admin-token", adminToken}
	})
	rotated := e.newReplica(func(c *api.Config) { c.AdminToken = newToken })

	rotating.do(t, "POST", "/v1/tenants", adminToken, `{"name":"via-old"}`).want(t, 201)
	rotating.do(t, "POST", "/v1/tenants", newToken, `{"name":"via-new"}`).want(t, 201)
	rotated.do(t, "POST", "/v1/tenants", newToken, `{"name":"via-new-2"}`).want(t, 201)
	rotated.do(t, "POST", "/v1/tenants", adminToken, `{"name":"refused"}`).wantProblem(t, 401, api.CodeUnauthorized)
	for _, bad := range []string{"", "new-admin", newToken + "x", adminToken[:len(adminToken)-1]} {
		rotating.do(t, "POST", "/v1/tenants", bad, `{"name":"refused"}`).wantProblem(t, 401, api.CodeUnauthorized)
	}
	// The old token is no API key: the tenant routes refuse it on the rotating server too.
	rotating.do(t, "GET", "/v1/sessions", adminToken, nil).wantProblem(t, 401, api.CodeUnauthorized)
}
