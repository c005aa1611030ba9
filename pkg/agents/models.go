package agents

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/llm/openai"
	"github.com/dshd/dshd/pkg/preset"
)

// modelClients gives a session its model client: the seam between the wiring of a preset's agent
// and the model clients with their credentials (models).
type modelClients interface {
	// Provider returns the model client of a preset's model settings, for a session of tenantID,
	// and the defaults its provider declares; an error is the *llm.Error every model call of the
	// session ends with (the client cannot be built).
	Provider(m preset.Model, tenantID uuid.UUID) (llm.Provider, llm.Defaults, error)
}

// maxClients bounds the cached model clients (one per base URL and key: the operator's, or one
// tenant credential's); the least recently used is dropped beyond it (the sessions using it keep
// it).
const maxClients = 64

// models builds the model clients of presets from the agents' Config (its model fields, the
// operator's key, the credential resolver) and caches them by base URL and key, bounded. It is
// safe for concurrent use.
type models struct {
	cfg Config

	// mu guards clients, lru and credRefs; it is held for map and list operations only.
	mu      sync.Mutex
	clients map[string]*list.Element
	lru     *list.List // of *client, most recently used first
	// credRefs maps the credentials presets name ("<tenant>\x00<name or id>") to the id each
	// last resolved to (credentialFound).
	credRefs map[string]string
	// credWarns rate-limits the warning about a tenant credential that cannot be used.
	credWarns warnLimiter
}

// newModels returns the model clients of cfg, whose defaults New has filled.
func newModels(cfg Config) *models {
	return &models{cfg: cfg, clients: map[string]*list.Element{}, lru: list.New()}
}

// client is a cached model client; key is its cache key (clientKey).
type client struct {
	key        string
	credential string // the tenant credential's id, "" for the operator's key or none
	p          llm.Provider
}

// unavailable is the model provider of a preset whose provider cannot be built: every call fails
// with err.
type unavailable struct{ err error }

func (u unavailable) Stream(context.Context, llm.Request) (llm.Stream, error) { return nil, u.err }

// Provider returns the model client of a preset's model settings and the defaults the
// provider declares: deepseek DeepSeek's (openai.DeepSeekDefaults), openai and scripted none.
// deepseek and openai share the OpenAI wire and its clients, and the rules of the operator's key.
func (ms *models) Provider(m preset.Model, tenantID uuid.UUID) (llm.Provider, llm.Defaults, error) {
	var defaults llm.Defaults
	switch m.Provider {
	case preset.ProviderScripted:
		if ms.cfg.ScriptedDisabled {
			return nil, defaults, llm.NewError(llm.CodeNoAdapter, "the scripted model provider is disabled on this server (DSHD_SCRIPTED_MODEL=0)")
		}
		return ms.cfg.Scripted, defaults, nil
	case preset.ProviderDeepSeek:
		defaults = openai.DeepSeekDefaults()
	case preset.ProviderOpenAI:
	default:
		return nil, defaults, llm.NewError(llm.CodeNoAdapter, "no model adapter for provider %q", clip(m.Provider))
	}
	p, err := ms.openAIClient(m, tenantID)
	return p, defaults, err
}

// openAIClient returns the OpenAI-wire client of a deepseek or openai preset. A preset naming a
// credential gets a client that resolves it at every call (credentialModel); any other gets the
// operator's key on DeepSeek's endpoint only, and only while the operator lends it.
func (ms *models) openAIClient(m preset.Model, tenantID uuid.UUID) (llm.Provider, error) {
	baseURL, deepseek := "", true // no baseUrl: the default DeepSeek endpoint
	if m.BaseURL != "" {
		u, err := openai.AllowedBaseURL(m.BaseURL, ms.cfg.ModelHosts)
		if err != nil {
			return nil, llm.NewError(llm.CodeNoAdapter, "model baseUrl is not allowed: %s", clip(err.Error()))
		}
		baseURL = u.String() // the URL that was checked, not a differently-read spelling of it
		deepseek = openai.IsDeepSeekEndpoint(u)
	}
	if m.Credential != "" {
		return &credentialModel{ms: ms, tenantID: tenantID, ref: m.Credential, provider: m.Provider, baseURL: baseURL}, nil
	}
	if !deepseek {
		return ms.client(baseURL, "", ""), nil // the operator's key goes to DeepSeek only
	}
	if ms.cfg.NoOperatorKeyFallback {
		return nil, llm.NewError(llm.CodeInvalidCredential, "this server does not lend its DeepSeek key to presets: "+
			"store a credential (POST /v1/credentials) and name it in the preset's model.credential")
	}
	return ms.client(baseURL, "", ms.cfg.DeepSeekAPIKey), nil
}

// clientKey is the cache key of the client of a base URL and key: the credential's id for a
// tenant credential ("" for the operator's key) and a fingerprint of the key, so that clients
// are shared only by calls with the very same key.
func clientKey(baseURL, credential, apiKey string) string {
	sum := sha256.Sum256([]byte(apiKey))
	return baseURL + "\x00" + credential + "\x00" + hex.EncodeToString(sum[:8])
}

// client returns the cached model client of a base URL ("" for the default endpoint) and key
// (credential is the tenant credential's id, "" for the operator's key or none). A client serves
// every model of its endpoint: the model is sent per request (llm.Request.Config.Model, which the
// agent loop fills from the preset).
func (ms *models) client(baseURL, credential, apiKey string) llm.Provider {
	key := clientKey(baseURL, credential, apiKey)
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if e, ok := ms.clients[key]; ok {
		ms.lru.MoveToFront(e)
		return e.Value.(*client).p
	}
	c := &client{key: key, p: ms.cfg.OpenAIFunc(openai.Config{BaseURL: baseURL, APIKey: apiKey, MaxAttempts: 1,
		Logger: ms.cfg.Logger})}
	c.credential = credential
	ms.clients[key] = ms.lru.PushFront(c)
	for ms.lru.Len() > maxClients {
		delete(ms.clients, ms.lru.Remove(ms.lru.Back()).(*client).key)
	}
	return c.p
}

// credentialFound records that the credential a tenant's preset names (ref, "<tenant>\x00<name
// or id>") resolved to the credential id ("" none: gone, or unusable) and, when it resolved to
// another one before, forgets that one's cached clients, and so its decrypted key. Calls in
// flight keep their client.
func (ms *models) credentialFound(ref, id string) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if ms.credRefs == nil || len(ms.credRefs) >= 4096 {
		ms.credRefs = map[string]string{} // forgetting costs only an early drop
	}
	last := ms.credRefs[ref]
	if id == "" {
		delete(ms.credRefs, ref)
	} else {
		ms.credRefs[ref] = id
	}
	if last == "" || last == id {
		return
	}
	for e := ms.lru.Front(); e != nil; {
		next := e.Next()
		if c := e.Value.(*client); c.credential == last {
			delete(ms.clients, c.key)
			ms.lru.Remove(e)
		}
		e = next
	}
}
