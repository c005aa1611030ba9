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
)

// credTenant is one tenant of TestTenantCredentialsTwoReplicasAndKeyRotation: its API key, its
// model key (stored as a credential) and its session.
type credTenant struct {
	name     string
	apiKey   string
	modelKey string
	session  string
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
// request after the revocation. Then the operator rotates the key encryption key (a new key
// first, `dshd rewrap-credentials`, the old key removed) and every stored credential still works
// for a turn.
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

	// Rotation of the operator key: b first (every replica restarted with it), rewrap, a removed.
	old := c.replicas
	for _, r := range old {
		r.stop()
	}
	rewrap := exec.Command(c.serverBin, "rewrap-credentials")
	rewrap.Env = append(os.Environ(), "DATABASE_URL="+c.dbURL, "DSHD_CREDENTIAL_KEYS=b:"+kekB+",a:"+kekA)
	out, err := rewrap.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "2 rewrapped, 0 already current, 0 failed") {
		t.Fatalf("rewrap-credentials: %v\n%s", err, out)
	}
	c.replicas = nil
	c.env = []string{"DSHD_CREDENTIAL_KEYS=b:" + kekB, "DSHD_OPERATOR_KEY_FALLBACK=0", "DSHD_LOG_LEVEL=debug"}
	c.startReplica()
	c.startReplica()
	runTurns(2)

	// No response, event or log line shows a model key or an operator key.
	secrets := map[string]string{"tenant one's model key": tenants[0].modelKey, "tenant two's model key": tenants[1].modelKey,
		"operator key a": kekA, "operator key b": kekB}
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
	check("the rewrap output", out)
	for _, tn := range tenants {
		evs, err := c.replicas[0].events(ctx, tn.apiKey, tn.session)
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
	for _, r := range append(old, c.replicas...) {
		logs := r.output()
		if !strings.Contains(logs, `"level"`) {
			t.Fatalf("%s wrote no log lines", r.name)
		}
		check(r.name+"'s log", []byte(logs))
	}
}
