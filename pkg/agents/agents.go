// Package agents turns a session's pinned preset version into the configuration of its agent
// loop: a tool registry scope with the preset's restrictions and presentation mode, prompt
// sections and variables in a prompt scope, a scheduler with the preset's parallelism, and the
// model provider; the settings read below the loop (approval, run_code sub-calls) are kept per
// agent (Settings). A preset version is immutable, so its scope is set up once and shared by its
// sessions while any of them uses it (Agent hands out a release func; the scope is
// reference-counted). Unused scopes are kept in a bounded LRU (Config.MaxIdleScopes) and
// disposed when they fall out of it: every registration made for them (declared tools,
// restrictions, presentation mode, tool policies, approval asks, prompt sections and variables)
// is undone, and the next Agent call of that version sets it up again. Model clients are cached
// by base URL and key, bounded: a preset naming a tenant credential (model.credential) resolves
// it at every model call and never shares a client with another key.
//
// Setting a scope up and disposing it take time linear in the preset's size (its prompt is one
// promptasm bundle) and run outside the lock the agents share: a large preset being set up
// delays only the sessions of that preset version (its first Agent call sets it up, later ones
// wait for that setup), never another preset's.
package agents

import (
	"container/list"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/agentloop"
	"github.com/dshd/dshd/pkg/approval"
	"github.com/dshd/dshd/pkg/codemode"
	"github.com/dshd/dshd/pkg/kernel"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/llm/openai"
	"github.com/dshd/dshd/pkg/llm/scripted"
	"github.com/dshd/dshd/pkg/policy"
	"github.com/dshd/dshd/pkg/preset"
	"github.com/dshd/dshd/pkg/promptasm"
	"github.com/dshd/dshd/pkg/registry"
	"github.com/dshd/dshd/pkg/scheduler"
	"github.com/dshd/dshd/pkg/tenant"
)

// Config configures the agents of a server.
type Config struct {
	// Tools are the built-in tools, registered globally.
	Tools []*registry.Tool
	// Approvals resolves the asks of agents whose approval policy is `ask` (pkg/approval, over
	// the session log). Nil: such asks are denied as with no approval service (APR-1); `never`
	// is resolved here either way (APR-4).
	Approvals registry.Approver
	// DeepSeekAPIKey is the operator's key for DeepSeek. It is sent only to the default DeepSeek
	// endpoint: a deepseek or openai preset without a baseUrl, or with an https baseUrl on host
	// api.deepseek.com and the default port (openai.IsDeepSeekEndpoint). A preset pointing
	// anywhere else (another provider, a proxy, a local server) gets no key: its requests carry
	// no Authorization header. A preset that names a tenant credential (model.credential) never
	// gets it. Empty: DeepSeek presets without a credential fail their turns with
	// INVALID_CREDENTIAL (from the provider).
	DeepSeekAPIKey string
	// NoOperatorKeyFallback stops lending DeepSeekAPIKey to presets: a deepseek or openai preset
	// without a credential whose endpoint is DeepSeek's fails its turns with INVALID_CREDENTIAL
	// instead (DSHD_OPERATOR_KEY_FALLBACK=0). Presets pointing elsewhere without a credential
	// still call without a key. Default false: the operator's key is the fallback.
	NoOperatorKeyFallback bool
	// Credentials resolves the tenant credentials presets name (pgstore.Credentials). It is
	// asked at every model call, so a deleted credential stops being used at once. Nil: a preset
	// naming a credential fails its model calls with INVALID_CREDENTIAL.
	Credentials CredentialResolver
	// ModelHosts are the hosts a deepseek or openai preset's baseUrl may point at (checked again here, not
	// only when the preset is written, by the same openai.AllowedBaseURL). Default:
	// api.deepseek.com.
	ModelHosts []string
	// Scripted is the scripted model; default scripted.New with default settings.
	Scripted llm.Provider
	// ScriptedDisabled turns the scripted provider off: a scripted preset's Agent fails with
	// NO_ADAPTER. Default false: scripted stays the offline default model.
	ScriptedDisabled bool
	// OpenAIFunc builds the client of a deepseek or openai preset; default openai.New. It is
	// given MaxAttempts 1: the agent loop retries (the preset's model.retries) and logs each
	// retry. Tests point it at cmd/mockllm through ModelHosts instead of replacing it.
	OpenAIFunc func(openai.Config) llm.Provider
	// DefaultToolTimeoutMs bounds the body of every tool that sets no TimeoutMs of its own
	// (extension E2, docs/rules.md): past it the call ends with a timeout result. Default
	// DefaultToolTimeoutMs (10 minutes); negative leaves such tools unbounded.
	DefaultToolTimeoutMs int
	// Loop is the base agent loop configuration (chunk window, retry backoff, clock, logger);
	// the per-session fields are filled by Agent (model, provider defaults, model.retries).
	Loop agentloop.Config
	// MaxIdleScopes bounds the preset-version scopes kept set up while no session uses them;
	// beyond it the least recently released is disposed. A scope in use is never disposed.
	// Default DefaultMaxIdleScopes (256); negative keeps none (a scope is disposed as soon as
	// its last user releases it).
	MaxIdleScopes int
	// PolicyWebhooks configures the policy webhooks presets may name (pkg/policy).
	PolicyWebhooks PolicyWebhooks
	// Logger receives setup failures; default slog.Default().
	Logger *slog.Logger
	// CodeRuntime is the code-mode runtime (codemode.go): New installs its run_code, and presets
	// in mode code or both get its SDK. Nil: such presets fail their setup (PRS-6).
	CodeRuntime *codemode.Runtime
	// Workspace is the workspace tools' configuration (the same given to BuiltinTools), nil for
	// none. With it, Agent binds each session's workspace to the session's tenant (so the
	// tenant's workspace bound counts it), and presets whose tools.bash.network is on get a bash
	// whose commands have the egress network (and whose description says so) in place of the
	// global one: it is registered in a scope of its own that such presets' scopes inherit
	// from, so their tools.allow and tools.deny apply to it as to any tool.
	Workspace *WorkspaceTools
	// SandboxNetworkDisabled forbids the sandbox network (DSHD_SANDBOX_NETWORK=0): Rules refuses
	// presets whose tools.bash.network is on, and ones stored before get the bash without it.
	SandboxNetworkDisabled bool
}

// CredentialResolver returns a tenant's stored credential with its decrypted key, by the name or
// id a preset names (pgstore.Credentials.CredentialResolve): tenant.ErrCredentialNotFound when
// the tenant has no such credential, tenant.ErrCredentialsDisabled without a keyring.
type CredentialResolver interface {
	CredentialResolve(ctx context.Context, tenantID uuid.UUID, ref string) (tenant.CredentialSecret, error)
}

// PolicyWebhooks are the operator's settings of preset policy webhooks.
type PolicyWebhooks struct {
	// Key is the key every preset's webhook signing secret is derived from (policy.Secret, the
	// same on every replica). Empty disables policy webhooks: Rules refuses presets naming one,
	// and one stored before fails its calls closed.
	Key []byte
	// AllowHTTP allows http:// webhook URLs (tests); otherwise https only.
	AllowHTTP bool
	// AllowPrivate allows webhooks on loopback, private and link-local addresses (tests, private
	// deployments); otherwise the address of every connection is checked when it is dialled.
	AllowPrivate bool
	// RootCAs replaces the system roots for https webhooks (tests).
	RootCAs *x509.CertPool
}

// Defaults of Config.
const (
	// DefaultToolTimeoutMs is the default of Config.DefaultToolTimeoutMs: 10 minutes.
	DefaultToolTimeoutMs = 600_000
	// DefaultMaxIdleScopes is the default of Config.MaxIdleScopes.
	DefaultMaxIdleScopes = 256
)

// Agents builds agent loop configurations. It is safe for concurrent use.
type Agents struct {
	cfg    Config
	k      *kernel.Kernel
	reg    *registry.Registry
	prompt *promptasm.Registry
	// codeRuntime is Config.CodeRuntime as prompt assembly sees it; nil without one.
	codeRuntime *promptasm.CodeRuntime

	// models gives each session its model client (models.go).
	models modelClients

	// mu guards the scopes and their reference counts. It is held for map and list operations
	// only: a scope is set up and disposed without it (see acquire and release).
	mu     sync.Mutex
	scopes map[string]*scope        // by preset version key: the scopes in use and the idle ones
	idle   *list.List               // of *scope with no references, most recently released first
	gone   map[string]chan struct{} // keys whose evicted scope is being disposed; closed when done

	// setupHook, when set (by tests, before any Agent call), is called in the middle of every
	// scope's setup, outside mu.
	setupHook func(key string)

	// webhooks calls the preset policy webhooks; nil while they are disabled (no key).
	webhooks *policy.Client

	// netScope holds the definitions of presets with tools.bash.network (Config.Workspace):
	// their scopes are declared under it. Nil when there are none or the network is forbidden.
	netScope *kernel.Scope

	heldMu sync.RWMutex
	held   map[string]*held // by agent (session id): the agents whose configuration is held
}

// scope is the set-up state of one preset version. Its fields other than refs and elem are
// written by the one setup, before ready is closed, and only read after.
type scope struct {
	key      string
	ready    chan struct{} // closed when the setup is done
	sched    *scheduler.Scheduler
	settings Settings
	canAsk   bool     // the preset's calls may ask for approval (canAsk): its prompt states the policy
	declared []string // the names of the preset's declared tools (declareTools)
	err      error    // a setup failure: every turn of the preset version ends with it
	failing  *promptasm.Registry
	fiber    *kernel.Fiber // the registry registrations (restrictions, mode, policies, asks)
	// declaredFiber registers the declared tools in their scope (declareTools); nil without them.
	declaredFiber *kernel.Fiber
	// group is the policies' scheduler group hook (E5: one pre-execute webhook request per
	// group); nil without a pre-execute webhook. Set by the setup.
	group func(context.Context, []registry.Input) func(context.Context) context.Context
	undo  []func()      // the promptasm registrations
	refs  int           // under Agents.mu
	elem  *list.Element // in idle when refs is 0; under Agents.mu
}

// New registers the built-in tools and returns the agents of a server.
func New(cfg Config) (*Agents, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Scripted == nil {
		cfg.Scripted = scripted.New(scripted.Config{})
	}
	if cfg.OpenAIFunc == nil {
		cfg.OpenAIFunc = func(c openai.Config) llm.Provider { return openai.New(c) }
	}
	switch {
	case cfg.MaxIdleScopes == 0:
		cfg.MaxIdleScopes = DefaultMaxIdleScopes
	case cfg.MaxIdleScopes < 0:
		cfg.MaxIdleScopes = 0
	}
	if len(cfg.ModelHosts) == 0 {
		cfg.ModelHosts = []string{"api.deepseek.com"}
	}
	switch {
	case cfg.DefaultToolTimeoutMs == 0:
		cfg.DefaultToolTimeoutMs = DefaultToolTimeoutMs
	case cfg.DefaultToolTimeoutMs < 0:
		cfg.DefaultToolTimeoutMs = 0 // the registry's "unbounded"
	}
	k := kernel.New(cfg.Logger)
	reg, err := registry.New(registry.Config{Scopes: k.Scopes(), Logger: cfg.Logger,
		DefaultTimeoutMs: cfg.DefaultToolTimeoutMs})
	if err != nil {
		return nil, err
	}
	a := &Agents{cfg: cfg, k: k, reg: reg, models: newModels(cfg), scopes: map[string]*scope{}, idle: list.New(),
		gone: map[string]chan struct{}{}, held: map[string]*held{}}
	if w := cfg.PolicyWebhooks; len(w.Key) > 0 {
		a.webhooks = policy.NewClient(policy.ClientConfig{AllowHTTP: w.AllowHTTP, AllowPrivate: w.AllowPrivate, RootCAs: w.RootCAs})
	}
	reg.MountApprover(registry.ApproverFunc(a.approve))
	g := k.Fiber("builtin-tools", nil)
	for _, t := range cfg.Tools {
		if _, err := reg.Register(g, t); err != nil {
			return nil, fmt.Errorf("agents: register %s: %w", t.Name, err)
		}
	}
	if err := a.mountCodeRuntime(g); err != nil {
		return nil, err
	}
	if err := a.mountNetworkTools(); err != nil {
		return nil, err
	}
	pr, err := promptasm.New(promptasm.Config{})
	if err != nil {
		return nil, err
	}
	a.prompt = pr
	if _, err := pr.Tools(promptasm.Global, a.toolSet); err != nil {
		return nil, err
	}
	// APR-6: the approval policy in force is stated to the model as runtime context.
	if _, err := pr.RuntimeContext(promptasm.Global, promptasm.ContextEntry{Name: approval.PolicyContextName,
		Order: approval.PolicyContextOrder, TextFunc: a.policyContext}); err != nil {
		return nil, err
	}
	return a, nil
}

// Rules returns the preset validation rules of what these agents can run: a preset they accept
// gets a model provider (its baseUrl host is among Config.ModelHosts, with their default; it is
// not scripted while Config.ScriptedDisabled), names policy webhooks only when
// Config.PolicyWebhooks has a key (with its http and private-address settings), and declares
// no tool of a built-in tool's name. The server validates presets with them.
func (a *Agents) Rules() preset.Rules {
	w := a.cfg.PolicyWebhooks
	return preset.Rules{ModelHosts: slices.Clone(a.cfg.ModelHosts), ScriptedDisabled: a.cfg.ScriptedDisabled,
		PolicyWebhookKey: slices.Clone(w.Key), PolicyWebhookHTTP: w.AllowHTTP, PolicyWebhookPrivate: w.AllowPrivate,
		SandboxNetworkDisabled: a.cfg.SandboxNetworkDisabled, BuiltinTools: a.reg.Names("")}
}

// Registry returns the tool registry (for the catalogue).
func (a *Agents) Registry() *registry.Registry { return a.reg }

// toolSet provides the wire tools of the scope an assembly runs in: the nearest chain element.
// The names toolOrder may list are the global tools and the scope's declared tools, before
// restrictions.
func (a *Agents) toolSet(_ context.Context, in promptasm.Input) (promptasm.ToolSet, error) {
	key := ""
	if len(in.Chain) > 0 {
		key = in.Chain[len(in.Chain)-1]
	}
	s, err := a.reg.Schemas(key)
	if err != nil {
		return promptasm.ToolSet{}, err
	}
	return promptasm.ToolSet{Schemas: s, KnownNames: append(a.reg.Names(""), a.declaredNames(key)...)}, nil
}

// Session is what Agent needs to know of a session.
type Session struct {
	ID       uuid.UUID
	TenantID uuid.UUID     // whose credentials the preset's model.credential names
	Preset   preset.Preset // the pinned version
}

// Agent returns the agent loop configuration of a session and the func that releases it. The
// configuration's scope stays set up until release is called (once, when the runner built from
// it is dropped; calling it again does nothing). A preset version whose setup failed (for
// example a restriction naming a tool that does not exist) still yields a configuration: its
// prompt assembly fails, so every turn ends with that error and no step. So does one whose model
// provider cannot be built (a baseUrl host no longer in Config.ModelHosts, a scripted preset
// while Config.ScriptedDisabled; Rules refuses both when a preset is written): every model call
// fails at once with that *llm.Error (code NO_ADAPTER, not retried), so every turn ends with
// turn/end {kind: error, error: {code: NO_ADAPTER}} after one step; Prompt returns the error.
// Agent itself returns no error for either, so a caller (the worker) runs such turns to their end
// instead of retrying the session's job. While the configuration is held,
// Settings(s.ID.String()) returns the agent's settings. The configuration's Park is set (E6):
// an ask and a call of a client-executed tool park the turn, and a parked ask waits the preset's
// approval.timeoutMs. On an error, release is a no-op.
func (a *Agents) Agent(s Session) (agentloop.Config, func(), error) {
	p := s.Preset.Body
	a.bindWorkspace(s)
	prov, defaults, err := a.models.Provider(p.Model, s.TenantID)
	if err != nil {
		a.cfg.Logger.Warn("the preset's model provider cannot be built: its turns end with the error",
			"preset", s.Preset.ID, "version", s.Preset.Version, "session", s.ID, "err", err)
		prov = unavailable{err}
	}
	sc := a.acquire(s.Preset)
	cfg := a.cfg.Loop
	cfg.SessionID = s.ID.String()
	cfg.Scope = sc.key
	cfg.Model = llm.Config{Provider: p.Model.Provider, Model: p.Model.Model, BaseURL: p.Model.BaseURL,
		ReasoningEffort: p.Model.ReasoningEffort}
	if p.Model.MaxTokens != nil {
		cfg.Model.MaxTokens = *p.Model.MaxTokens
	}
	cfg.ModelDefaults = defaults
	if p.Model.Retries != nil {
		n := *p.Model.Retries
		cfg.ModelRetries = &n
	}
	cfg.Provider = prov
	cfg.Prompt = a.prompt
	cfg.PromptInput = promptasm.Input{Chain: promptasm.Chain{sc.key}, ToolOrder: toolOrder(p.Tools.ToolOrder),
		Mode: promptasm.Mode(p.Tools.Mode), CodeRuntime: a.codeRuntime, Agent: s.ID.String()}
	cfg.Observe = a.observe(cfg.SessionID)
	cfg.Tools = a.reg
	cfg.Scheduler = sc.sched
	// E6: the session's asks and client-executed calls park the turn instead of holding the
	// runner; a parked ask waits the preset's approval.timeoutMs.
	cfg.Park = &agentloop.ParkConfig{ApprovalTimeout: sc.settings.Approval.Timeout}
	if p.Limits.MaxSteps != nil {
		cfg.MaxSteps = *p.Limits.MaxSteps
	}
	if sc.err != nil {
		cfg.Prompt, cfg.PromptInput = sc.failing, promptasm.Input{Chain: promptasm.Chain{sc.key}}
	}
	unhold := a.hold(cfg.SessionID, s.TenantID.String(), sc)
	var once sync.Once
	return cfg, func() {
		once.Do(func() {
			unhold()
			a.release(sc)
		})
	}, nil
}

func toolOrder(o []string) []string {
	if len(o) == 0 {
		return nil
	}
	return o
}

// acquire returns the scope of a preset version with one more reference, setting it up when it
// is not (or no longer) set up. The setup runs outside a.mu: the first caller of a version sets
// it up, and later callers of that version wait for it (ready); callers of other versions do
// not. A version whose evicted scope is still being disposed is set up again once that is done.
func (a *Agents) acquire(p preset.Preset) *scope {
	key := fmt.Sprintf("preset:%s@%d", p.ID, p.Version)
	for {
		a.mu.Lock()
		if sc, ok := a.scopes[key]; ok {
			if sc.elem != nil {
				a.idle.Remove(sc.elem)
				sc.elem = nil
			}
			sc.refs++
			a.mu.Unlock()
			<-sc.ready
			return sc
		}
		if done, ok := a.gone[key]; ok {
			a.mu.Unlock()
			<-done
			continue
		}
		sc := &scope{key: key, refs: 1, ready: make(chan struct{})}
		a.scopes[key] = sc
		a.mu.Unlock()
		a.build(sc, p)
		return sc
	}
}

// build sets sc up for p and closes sc.ready, also when the setup panics (the scope then fails
// its turns with errSetupIncomplete).
func (a *Agents) build(sc *scope, p preset.Preset) {
	completed := false
	defer func() {
		if !completed {
			sc.err, sc.failing = errSetupIncomplete, failing(errSetupIncomplete)
		}
		close(sc.ready)
	}()
	sc.settings = settingsOf(p.Body)
	sc.canAsk = canAsk(p.Body)
	cap := preset.DefaultMaxParallelToolCalls
	if p.Tools.MaxParallelToolCalls != nil {
		cap = *p.Tools.MaxParallelToolCalls
	}
	sc.sched = scheduler.New(a.reg, scheduler.Config{Logger: a.cfg.Logger,
		MaxParallelToolCallsFunc: func() int { return cap },
		// sc.group is set by the setup below, before any turn uses the scheduler (sc.ready).
		GroupFunc: func(ctx context.Context, calls []registry.Input) func(context.Context) context.Context {
			if sc.group == nil {
				return nil
			}
			return sc.group(ctx, calls)
		}})
	sc.err = a.setup(sc, p)
	completed = true
	if sc.err != nil {
		a.cfg.Logger.Warn("preset setup failed", "preset", p.ID, "version", p.Version, "err", sc.err)
		sc.failing = failing(sc.err)
	}
}

// errSetupIncomplete is the setup failure of a scope whose setup did not return (a panic).
var errSetupIncomplete = errors.New("the preset's setup did not complete")

// release drops a reference to sc. A scope nobody uses joins the idle LRU; the least recently
// released idle scopes beyond Config.MaxIdleScopes are disposed, outside a.mu. An idle scope's
// setup is done: every reference is taken by an acquire that returns only after it.
func (a *Agents) release(sc *scope) {
	type evicted struct {
		sc   *scope
		done chan struct{}
	}
	var out []evicted
	a.mu.Lock()
	sc.refs--
	if sc.refs == 0 {
		sc.elem = a.idle.PushFront(sc)
		for a.idle.Len() > a.cfg.MaxIdleScopes {
			old := a.idle.Remove(a.idle.Back()).(*scope)
			old.elem = nil
			delete(a.scopes, old.key)
			done := make(chan struct{})
			a.gone[old.key] = done
			out = append(out, evicted{old, done})
		}
	}
	a.mu.Unlock()
	for _, e := range out {
		a.dispose(e.sc)
		a.mu.Lock()
		delete(a.gone, e.sc.key)
		a.mu.Unlock()
		close(e.done)
	}
}

// dispose undoes every registration made for sc: the promptasm ones, then the fiber's
// (restrictions, presentation mode, policies, approval asks), each in reverse order, then the
// declared tools.
func (a *Agents) dispose(sc *scope) {
	for i := len(sc.undo) - 1; i >= 0; i-- {
		sc.undo[i]()
	}
	sc.undo = nil
	if sc.fiber != nil {
		sc.fiber.Dispose()
	}
	if sc.declaredFiber != nil {
		sc.declaredFiber.Dispose()
	}
}

// setup declares the scope and registers the preset's declared tools, restrictions, mode,
// policies, approval asks, and its persona, sections and variables as one promptasm bundle, keeping in sc what
// undoes them (also after a failure: dispose undoes what was registered before it).
func (a *Agents) setup(sc *scope, pv preset.Preset) error {
	p := pv.Body
	key := sc.key
	parent, err := a.declareTools(sc, a.parentScope(p), p.Tools.Declared)
	if err != nil {
		return err
	}
	s, err := a.k.Scopes().Declare(key, parent)
	if err != nil {
		return err
	}
	f := a.k.Fiber(key, s)
	sc.fiber = f
	if a.setupHook != nil {
		a.setupHook(key)
	}
	if len(p.Tools.Allow) > 0 || len(p.Tools.Deny) > 0 {
		rs := registry.Restriction{Deny: p.Tools.Deny}
		if len(p.Tools.Allow) > 0 {
			rs.Allow = p.Tools.Allow
		}
		if _, err := a.reg.Restrict(f, rs); err != nil {
			return err
		}
	}
	if m := registry.PresentMode(p.Tools.Mode); m != "" && m != registry.ModeNative {
		if err := a.checkCodeRuntime(m); err != nil {
			return err
		}
		if _, err := a.reg.PresentAs(f, m); err != nil {
			return err
		}
	}
	// The policies' pre-execute listener is registered before the approval asks: a rule that
	// fits decides first (an allow skips approval.ask), the others fall through to them.
	if err := a.installPolicies(sc, f, pv); err != nil {
		return err
	}
	if len(p.Approval.Ask) > 0 {
		if err := a.askFor(f, p.Approval.Ask); err != nil {
			return err
		}
	}
	undo, err := a.prompt.RegisterBundle(key, promptBundle(p.Prompt))
	if err != nil {
		return err
	}
	sc.undo = append(sc.undo, undo)
	return nil
}

// promptBundle is the persona, sections and variables of a preset, for its scope's layer.
func promptBundle(p preset.Prompt) promptasm.Bundle {
	b := promptasm.Bundle{Sections: make([]promptasm.Section, 0, len(p.Sections)+1),
		Variables: make([]promptasm.Variable, 0, len(p.Variables))}
	if p.Persona != "" {
		b.Sections = append(b.Sections, promptasm.Section{Name: promptasm.SectionPersona, Order: promptasm.OrderPersona, Text: p.Persona})
	}
	for _, sec := range p.Sections {
		order := 0.0
		if sec.Order != nil {
			order = *sec.Order
		}
		b.Sections = append(b.Sections, promptasm.Section{Name: sec.Name, Order: order, Text: sec.Text, Complete: sec.Complete})
	}
	for name, value := range p.Variables {
		b.Variables = append(b.Variables, promptasm.Variable{Name: name,
			Func: func(context.Context, promptasm.Input) (string, bool) { return value, true }})
	}
	return b
}

// askFor makes calls of the named tools, in the preset's scope, ask for approval (PIPE-4). Until
// durable approvals are built, an ask is rejected under policy `never` (approve) and denied
// otherwise (APR-1: `tool "<n>" requires approval (not yet supported)`), so a tool the preset
// guards never runs unapproved.
func (a *Agents) askFor(f *kernel.Fiber, tools []string) error {
	ask := map[string]bool{}
	for _, t := range tools {
		ask[t] = true
	}
	_, err := kernel.Listen(f, a.reg.Hooks.PreExecute, kernel.WaterfallFunc[*registry.Execution, registry.Decision](
		func(ctx context.Context, e *registry.Execution, next func(context.Context) (registry.Decision, error)) (registry.Decision, error) {
			if ask[e.Name] {
				return registry.Ask(""), nil
			}
			return next(ctx)
		}))
	return err
}

// installPolicies installs the preset's policies block on its scope (pkg/policy): pre-execute
// rules and webhook, guards, post-execute rules and webhook, and sets sc.group so that the
// pre-execute webhook is asked once per group of calls (E5).
func (a *Agents) installPolicies(sc *scope, f *kernel.Fiber, pv preset.Preset) error {
	set, err := policy.Compile(pv.Policies)
	if err != nil || set.Empty() {
		return err
	}
	env := policy.Env{PresetID: pv.ID.String(), PresetVersion: pv.Version, Logger: a.cfg.Logger}
	if a.webhooks != nil {
		env.Client, env.Secret = a.webhooks, policy.Secret(a.cfg.PolicyWebhooks.Key, pv.ID)
	}
	if err := set.Install(f, a.reg, env); err != nil {
		return err
	}
	sc.group = set.GroupFunc(env)
	return nil
}

// failing returns a prompt registry whose assembly fails with a setup error.
func failing(setupErr error) *promptasm.Registry {
	pr, _ := promptasm.New(promptasm.Config{})
	err := fmt.Errorf("preset setup failed: %w", setupErr)
	_, _ = pr.OnAssemble(promptasm.Global, func(context.Context, promptasm.Assembly, promptasm.Next) (promptasm.Assembly, error) {
		return promptasm.Assembly{}, err
	})
	return pr
}

// Prompt returns the system prompt and wire tools a session's agent would get now. The preset
// version's scope is held for the assembly only.
func (a *Agents) Prompt(ctx context.Context, s Session) (promptasm.Result, error) {
	cfg, release, err := a.Agent(s)
	if err != nil {
		return promptasm.Result{}, err
	}
	defer release()
	if u, ok := cfg.Provider.(unavailable); ok {
		return promptasm.Result{}, u.err
	}
	in := cfg.PromptInput
	in.Provider, in.Model = cfg.Model.Provider, cfg.Model.Model
	return cfg.Prompt.Assemble(ctx, in)
}

// clip returns s for an error message or log line: at most 256 bytes, cut at a rune boundary
// and marked with "…" when cut. What a preset names is repeated in errors only through it.
func clip(s string) string {
	const limit = 256
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
