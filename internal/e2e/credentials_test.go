package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/mockllm"
)

// credTenant is one tenant of TestTenantCredentialsTwoReplicasAndKeyRotation: its API key, its
// model key (stored as a credential) and its session.
type credTenant struct {
	name     string
	apiKey   string
	modelKey string
	session  string
	// echoSession's turn reached a provider that echoed the model key back (mockllm.EchoKeyModel).
	echoSession string
}

// kek returns a fresh operator key encryption key, base64.
func kek(t *testing.T) string {
	t.Helper()
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(raw)
}

// mockCall is a request mockllm received (GET /_calls).
type mockCall struct {
	Authorization string          `json:"authorization"`
	Body          json.RawMessage `json:"body"`
}

func (c *cluster) mockCalls(t *testing.T) []mockCall {
	t.Helper()
	resp, err := http.Get(c.mockURL + "/_calls")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var calls []mockCall
	if err := json.NewDecoder(resp.Body).Decode(&calls); err != nil {
		t.Fatal(err)
	}
	return calls
}

// TestTenantCredentialsTwoReplicasAndKeyRotation is the acceptance of issue 13's credentials and
// API keys: two tenants with their own model credentials on two replicas; each turn reaches
// cmd/mockllm with its own tenant's key, and no response, event or log line shows a key or the
// operator's key encryption key. A revoked API key answers 401 on both replicas with the first
// request after the revocation. A provider that echoes the key in its 401 gets it masked. Then
// the operator rotates the key encryption key as documented: replicas restarted one after the
// other with `b,a`, serving turns of the old credentials and of one stored under b; `dshd
// rewrap-credentials` while they serve; replicas restarted with b only; every stored credential
// still works for a turn.
func TestTenantCredentialsTwoReplicasAndKeyRotation(t *testing.T) {
	kekA, kekB := kek(t), kek(t)
	c := newClusterOn(t, 2, 10*time.Second, "", "DSHD_CREDENTIAL_KEYS=a:"+kekA, "DSHD_OPERATOR_KEY_FALLBACK=0",
		"DSHD_LOG_LEVEL=debug")
	ctx := t.Context()
	var bodies [][]byte // every response body of the test
	call := func(r *replica, method, path, key string, body any) reply {
		rp := r.call(ctx, method, path, key, body)
		bodies = append(bodies, rp.body)
		return rp
	}
	var second struct{ APIKey string }
	mustJSON(t, call(c.replicas[0], "POST", "/v1/tenants", adminToken, map[string]string{"name": "second"}), 201, &second)
	tenants := []*credTenant{
		{name: "one", apiKey: c.key, modelKey: "model-key-of-tenant-one.A1"},
		{name: "two", apiKey: second.APIKey, modelKey: "model-key-of-tenant-two.B2"},
	}
	for i, tn := range tenants {
		r := c.replicas[i] // each tenant writes through another replica
		var cred struct{ ID, Name string }
		mustJSON(t, call(r, "POST", "/v1/credentials", tn.apiKey,
			map[string]string{"name": "llm", "provider": "openai", "apiKey": tn.modelKey}), 201, &cred)
		var p, s struct{ ID string }
		mustJSON(t, call(r, "POST", "/v1/presets", tn.apiKey, map[string]any{"name": "own-key",
			"model": map[string]string{"provider": "openai", "model": "mock", "baseUrl": c.mockURL, "credential": "llm"}}), 201, &p)
		mustJSON(t, call(r, "POST", "/v1/sessions", tn.apiKey, map[string]string{"presetId": p.ID}), 201, &s)
		tn.session = s.ID
	}

	// A turn of each tenant, each posted to the replica the other tenant wrote through.
	runTurns := func(round int) {
		t.Helper()
		for i, tn := range tenants {
			r := c.replicas[(i+1)%2]
			content := fmt.Sprintf("say:round%d-%s", round, tn.name)
			if err := call(r, "POST", "/v1/sessions/"+tn.session+"/messages", tn.apiKey,
				map[string]string{"content": content}).decode(http.StatusAccepted, nil); err != nil {
				t.Fatal(err)
			}
		}
		for _, tn := range tenants {
			evs := c.replicas[0].waitEvents(t, tn.apiKey, tn.session, 60*time.Second, func(evs []storedEvent) bool {
				return len(turnEnds(evs)) == round
			})
			if ends := turnEnds(evs); ends[round-1].kind != "completed" {
				t.Fatalf("tenant %s: turn %d ended %q:\n%s", tn.name, round, ends[round-1].kind, describe(evs))
			}
		}
		// At the mock: every call of this round carried its own tenant's key.
		seen := map[string]bool{}
		for _, mc := range c.mockCalls(t) {
			for _, tn := range tenants {
				if !bytes.Contains(mc.Body, []byte(fmt.Sprintf("say:round%d-%s", round, tn.name))) {
					continue
				}
				seen[tn.name] = true
				if mc.Authorization != "Bearer "+tn.modelKey {
					t.Errorf("round %d: tenant %s's turn reached the model with %q", round, tn.name, mc.Authorization)
				}
			}
		}
		if len(seen) != len(tenants) {
			t.Fatalf("round %d: model calls of %v only", round, seen)
		}
	}
	runTurns(1)

	// A provider that echoes the key it was sent in its 401 (mockllm's echo-key model): the turn
	// ends INVALID_CREDENTIAL with the key masked, and the scans below find it nowhere.
	for _, tn := range tenants {
		var p, s struct{ ID string }
		mustJSON(t, call(c.replicas[1], "POST", "/v1/presets", tn.apiKey, map[string]any{"name": "echo",
			"model": map[string]string{"provider": "openai", "model": mockllm.EchoKeyModel, "baseUrl": c.mockURL, "credential": "llm"}}), 201, &p)
		mustJSON(t, call(c.replicas[1], "POST", "/v1/sessions", tn.apiKey, map[string]string{"presetId": p.ID}), 201, &s)
		if err := call(c.replicas[1], "POST", "/v1/sessions/"+s.ID+"/messages", tn.apiKey,
			map[string]string{"content": "text"}).decode(http.StatusAccepted, nil); err != nil {
			t.Fatal(err)
		}
		evs := c.replicas[0].waitEvents(t, tn.apiKey, s.ID, 60*time.Second, func(evs []storedEvent) bool { return len(turnEnds(evs)) == 1 })
		end := evs[len(evs)-1]
		if end.Type != "turn/end" || !bytes.Contains(end.raw, []byte("INVALID_CREDENTIAL")) ||
			!bytes.Contains(end.raw, []byte("Incorrect API key provided: ***")) {
			t.Fatalf("tenant %s: the echoing provider's turn ended %s", tn.name, end.raw)
		}
		tn.echoSession = s.ID
	}

	// Without the operator's fallback, a DeepSeek preset without a credential fails its turn at
	// once with INVALID_CREDENTIAL (no call leaves the server).
	var dp, ds struct{ ID string }
	mustJSON(t, call(c.replicas[1], "POST", "/v1/presets", c.key, map[string]any{"name": "operator-key",
		"model": map[string]string{"provider": "deepseek", "model": "deepseek-chat"}}), 201, &dp)
	mustJSON(t, call(c.replicas[1], "POST", "/v1/sessions", c.key, map[string]string{"presetId": dp.ID}), 201, &ds)
	if err := call(c.replicas[1], "POST", "/v1/sessions/"+ds.ID+"/messages", c.key,
		map[string]string{"content": "text"}).decode(http.StatusAccepted, nil); err != nil {
		t.Fatal(err)
	}
	evs := c.replicas[1].waitEvents(t, c.key, ds.ID, 60*time.Second, func(evs []storedEvent) bool { return len(turnEnds(evs)) == 1 })
	for _, ev := range evs {
		if ev.Type == "turn/end" && !bytes.Contains(ev.raw, []byte("INVALID_CREDENTIAL")) {
			t.Fatalf("the fallback-less DeepSeek turn ended %s", ev.raw)
		}
	}

	// A revoked API key answers 401 on both replicas with the very first request after the
	// revocation: every request reads the key from the database, there is no cache to go stale.
	var temp struct{ ID, Secret string }
	mustJSON(t, call(c.replicas[0], "POST", "/v1/api-keys", tenants[1].apiKey, map[string]string{"name": "temp"}), 201, &temp)
	for _, r := range c.replicas {
		mustJSON(t, call(r, "GET", "/v1/sessions/"+tenants[1].session, temp.Secret, nil), 200, nil)
	}
	mustJSON(t, call(c.replicas[1], "DELETE", "/v1/api-keys/"+temp.ID, tenants[1].apiKey, nil), 204, nil)
	for _, r := range c.replicas {
		if rp := call(r, "GET", "/v1/sessions/"+tenants[1].session, temp.Secret, nil); rp.err != nil || rp.status != 401 {
			t.Fatalf("%s: the revoked key answered %d %s (%v)", r.name, rp.status, rp.body, rp.err)
		}
	}

	// Rotation of the operator key, as docs/credentials-and-keys.md describes it: b put first on
	// every replica (one after the other); under b,a the old credentials still open and a new one
	// is wrapped by b; the rewrap runs while the replicas serve turns; then a is removed.
	all := append([]*replica(nil), c.replicas...) // every replica that ran, for the log scan
	restart := func(env ...string) {
		t.Helper()
		old := c.replicas
		c.replicas = nil
		c.env = env
		for _, r := range old { // rolling: the other replica serves while one restarts
			r.stop()
			all = append(all, c.startReplica())
		}
	}
	restart("DSHD_CREDENTIAL_KEYS=b:"+kekB+",a:"+kekA, "DSHD_OPERATOR_KEY_FALLBACK=0", "DSHD_LOG_LEVEL=debug")
	runTurns(2)
	fresh := &credTenant{name: "fresh", apiKey: tenants[0].apiKey, modelKey: "model-key-stored-under-b.C3"}
	mustJSON(t, call(c.replicas[0], "POST", "/v1/credentials", fresh.apiKey,
		map[string]string{"name": "fresh", "provider": "openai", "apiKey": fresh.modelKey}), 201, nil)
	var fp, fs struct{ ID string }
	mustJSON(t, call(c.replicas[0], "POST", "/v1/presets", fresh.apiKey, map[string]any{"name": "fresh-key",
		"model": map[string]string{"provider": "openai", "model": "mock", "baseUrl": c.mockURL, "credential": "fresh"}}), 201, &fp)
	mustJSON(t, call(c.replicas[0], "POST", "/v1/sessions", fresh.apiKey, map[string]string{"presetId": fp.ID}), 201, &fs)
	fresh.session = fs.ID
	freshTurn := func(n int) {
		t.Helper()
		content := fmt.Sprintf("say:fresh-%d", n)
		if err := call(c.replicas[1], "POST", "/v1/sessions/"+fresh.session+"/messages", fresh.apiKey,
			map[string]string{"content": content}).decode(http.StatusAccepted, nil); err != nil {
			t.Fatal(err)
		}
		evs := c.replicas[0].waitEvents(t, fresh.apiKey, fresh.session, 60*time.Second, func(evs []storedEvent) bool {
			return len(turnEnds(evs)) == n
		})
		if ends := turnEnds(evs); ends[n-1].kind != "completed" {
			t.Fatalf("the credential stored under b: turn %d ended %q:\n%s", n, ends[n-1].kind, describe(evs))
		}
		for _, mc := range c.mockCalls(t) {
			if bytes.Contains(mc.Body, []byte(content)) && mc.Authorization != "Bearer "+fresh.modelKey {
				t.Fatalf("the credential stored under b reached the model with %q", mc.Authorization)
			}
		}
	}
	freshTurn(1)
	// (The rewrap's "1 already current" below is this credential, wrapped by b.)

	// The rewrap, while both replicas serve a round of turns.
	rewrap := exec.Command(c.serverBin, "rewrap-credentials")
	rewrap.Env = append(os.Environ(), "DATABASE_URL="+c.dbURL, "DSHD_CREDENTIAL_KEYS=b:"+kekB+",a:"+kekA)
	var out bytes.Buffer
	rewrap.Stdout, rewrap.Stderr = &out, &out
	if err := rewrap.Start(); err != nil {
		t.Fatal(err)
	}
	runTurns(3)
	if err := rewrap.Wait(); err != nil || !strings.Contains(out.String(), "2 rewrapped, 1 already current, 0 failed") {
		t.Fatalf("rewrap-credentials: %v\n%s", err, out.String())
	}
	runTurns(4)
	restart("DSHD_CREDENTIAL_KEYS=b:"+kekB, "DSHD_OPERATOR_KEY_FALLBACK=0", "DSHD_LOG_LEVEL=debug")
	runTurns(5)
	freshTurn(2)

	// No response, event or log line shows a model key or an operator key.
	secrets := map[string]string{"tenant one's model key": tenants[0].modelKey, "tenant two's model key": tenants[1].modelKey,
		"the model key stored under b": fresh.modelKey, "operator key a": kekA, "operator key b": kekB}
	check := func(where string, data []byte) {
		t.Helper()
		for what, s := range secrets {
			if bytes.Contains(data, []byte(s)) {
				t.Errorf("%s shows %s", where, what)
			}
		}
	}
	for i, b := range bodies {
		check(fmt.Sprintf("response %d", i), b)
	}
	check("the rewrap output", out.Bytes())
	for _, tn := range append(tenants, fresh) {
		for _, sid := range []string{tn.session, tn.echoSession} {
			if sid == "" {
				continue
			}
			evs, err := c.replicas[0].events(ctx, tn.apiKey, sid)
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) == 0 {
				t.Fatal("no events")
			}
			for _, ev := range evs {
				check(fmt.Sprintf("event %d of tenant %s", ev.Seq, tn.name), ev.raw)
			}
		}
	}
	for _, r := range all {
		logs := r.output()
		if !strings.Contains(logs, `"level"`) {
			t.Fatalf("%s wrote no log lines", r.name)
		}
		check(r.name+"'s log", []byte(logs))
	}
}
