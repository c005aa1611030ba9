package agents_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/internal/mockllm"
	"github.com/dshd/dshd/internal/pgtest"
	"github.com/dshd/dshd/pkg/agentloop"
	"github.com/dshd/dshd/pkg/agents"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/preset"
	"github.com/dshd/dshd/pkg/secretbox"
	"github.com/dshd/dshd/pkg/tenant"
)

func testKeyring(t *testing.T, id string, fill byte) *secretbox.Keyring {
	t.Helper()
	k, err := secretbox.ParseKeyring(id + ":" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{fill}, secretbox.KeySize)))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// runTenant serves one message of a session of the tenant through the agent of p.
func runTenant(t *testing.T, a *agents.Agents, tenantID uuid.UUID, p preset.Preset) []eventlog.Event {
	t.Helper()
	cfg, release, err := a.Agent(agents.Session{ID: uuid.New(), TenantID: tenantID, Preset: p})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	j := eventlog.NewMemJournal(nil)
	if _, err := j.Append(context.Background(), func(eventlog.Head) ([]eventlog.NewEvent, error) {
		return []eventlog.NewEvent{{Type: eventlog.TypeInboxSpliced,
			Data: eventlog.Insertion(eventlog.InboxNextTurn, 0, llm.NewUserMessage("u1", "text"))}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := agentloop.NewRunner(cfg, j).Serve(context.Background()); err != nil {
		t.Fatal(err)
	}
	return j.Events()
}

// TestCredentialClientsDroppedAndWarningsBounded: the cached client of a tenant credential (and
// its decrypted key) is dropped once the credential is deleted, or replaced by another of the
// same name; a credential that does not decrypt fails every turn but is logged once a minute, not
// at every model call.
func TestCredentialClientsDroppedAndWarningsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ms := mockllm.New(mockllm.Config{})
	srv := httptest.NewServer(ms.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(ms.Close)
	pool := pgtest.Pool(t)
	tn, _, err := pgstore.NewTenants(pool).TenantCreate(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	creds := pgstore.NewCredentials(pool, testKeyring(t, "a", 1))
	var logs syncBuffer
	newAgents := func(resolver agents.CredentialResolver) *agents.Agents {
		a, err := agents.New(agents.Config{ModelHosts: []string{strings.TrimPrefix(srv.URL, "http://")},
			Credentials: resolver, Loop: agentloop.Config{RetryBackoff: time.Millisecond},
			Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	a := newAgents(creds)
	p := presetOf(t, `{"name":"p","model":{"provider":"openai","model":"m","baseUrl":"`+srv.URL+`/v1","credential":"mine"}}`)
	spec := tenant.CredentialSpec{Name: "mine", Provider: "openai", APIKey: "first-tenant-key"}
	c1, err := creds.CredentialCreate(ctx, tn.ID, spec)
	if err != nil {
		t.Fatal(err)
	}
	ended := func(evs []eventlog.Event, want string) {
		t.Helper()
		if ends := find(evs, eventlog.TypeTurnEnd); len(ends) != 1 || !strings.Contains(ends[0], want) {
			t.Fatalf("turn/end %v, want %s", ends, want)
		}
	}
	ended(runTenant(t, a, tn.ID, p), `"completed"`)
	if n := a.ClientCount(); n != 1 {
		t.Fatalf("%d clients cached, want 1", n)
	}

	// Deleted and created again under the same name: the next turn uses the new key, and the
	// client of the old one is gone.
	if err := creds.CredentialDelete(ctx, tn.ID, c1.ID); err != nil {
		t.Fatal(err)
	}
	spec.APIKey = "second-tenant-key"
	if _, err := creds.CredentialCreate(ctx, tn.ID, spec); err != nil {
		t.Fatal(err)
	}
	ended(runTenant(t, a, tn.ID, p), `"completed"`)
	if n := a.ClientCount(); n != 1 {
		t.Fatalf("%d clients cached after the credential changed, want 1", n)
	}
	if calls := ms.Calls(); len(calls) != 2 || calls[1].Authorization != "Bearer second-tenant-key" {
		t.Fatalf("calls %+v", calls)
	}

	// Deleted: the turn ends INVALID_CREDENTIAL and no client (no key) is left.
	list, err := creds.CredentialList(ctx, tn.ID)
	if err != nil || len(list) != 1 {
		t.Fatalf("list %v, %v", list, err)
	}
	if err := creds.CredentialDelete(ctx, tn.ID, list[0].ID); err != nil {
		t.Fatal(err)
	}
	ended(runTenant(t, a, tn.ID, p), "INVALID_CREDENTIAL")
	if n := a.ClientCount(); n != 0 {
		t.Fatalf("%d clients cached after the credential was deleted, want 0", n)
	}

	// A credential this server cannot decrypt (another operator key): every turn fails, one
	// warning is logged.
	if _, err := creds.CredentialCreate(ctx, tn.ID, spec); err != nil {
		t.Fatal(err)
	}
	other := newAgents(pgstore.NewCredentials(pool, testKeyring(t, "b", 2)))
	for range 3 {
		ended(runTenant(t, other, tn.ID, p), "INVALID_CREDENTIAL")
	}
	if n := strings.Count(strings.Join(logs.lines(), "\n"), "a tenant credential cannot be used"); n != 1 {
		t.Fatalf("%d warnings about the credential, want 1:\n%s", n, strings.Join(logs.lines(), "\n"))
	}
	if strings.Contains(strings.Join(logs.lines(), "\n"), "tenant-key") {
		t.Fatalf("the log shows a key:\n%s", strings.Join(logs.lines(), "\n"))
	}
}
