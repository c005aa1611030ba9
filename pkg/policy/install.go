package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/kernel"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/registry"
)

// Set is a compiled policies block, ready to be installed on a scope. It is immutable and safe
// for concurrent use.
type Set struct {
	pre     []preRule
	guards  []guardRule
	post    []postRule
	preURL  string
	postURL string
	timeout time.Duration
}

type preRule struct {
	target
	decision, reason string
}

type guardRule struct {
	target
	reason string
}

type postRule struct {
	target
	action, text string
}

// target is the tools and argument regexps of a rule.
type target struct {
	all   bool
	tools map[string]bool
	match []argMatch
}

type argMatch struct {
	name string
	re   *regexp.Regexp
}

// Compile compiles a policies block (normalized or not). A block Check accepts compiles; the
// error is for blocks stored before a rule existed.
func Compile(p Policies) (*Set, error) {
	s := &Set{preURL: p.Webhooks.PreExecute, postURL: p.Webhooks.PostExecute,
		timeout: DefaultWebhookTimeoutMs * time.Millisecond}
	if t := p.Webhooks.TimeoutMs; t != nil && *t > 0 {
		s.timeout = time.Duration(*t) * time.Millisecond
	}
	for i, r := range p.PreExecute {
		t, err := compileTarget(r.Tools, r.Match)
		if err != nil {
			return nil, fmt.Errorf("policies.preExecute[%d]: %w", i, err)
		}
		s.pre = append(s.pre, preRule{t, r.Decision, r.Reason})
	}
	for i, r := range p.Guards {
		t, err := compileTarget(r.Tools, r.Match)
		if err != nil {
			return nil, fmt.Errorf("policies.guards[%d]: %w", i, err)
		}
		s.guards = append(s.guards, guardRule{t, r.Reason})
	}
	for i, r := range p.PostExecute {
		t, err := compileTarget(r.Tools, r.Match)
		if err != nil {
			return nil, fmt.Errorf("policies.postExecute[%d]: %w", i, err)
		}
		text := map[string]string{ActionBlock: r.Feedback, ActionReplace: r.Content, ActionAddContext: r.Context}[r.Action]
		s.post = append(s.post, postRule{t, r.Action, text})
	}
	return s, nil
}

func compileTarget(tools []string, match map[string]string) (target, error) {
	t := target{tools: map[string]bool{}}
	for _, name := range tools {
		if name == AllTools {
			t.all = true
		}
		t.tools[name] = true
	}
	for _, name := range sortedKeys(match) {
		re, err := regexp.Compile(match[name])
		if err != nil {
			return target{}, fmt.Errorf("match.%s: %w", echo(name), err)
		}
		t.match = append(t.match, argMatch{name, re})
	}
	return t, nil
}

// fits reports whether the rule applies to a call of tool name with args.
func (t *target) fits(name string, args *argsView) bool {
	if !t.all && !t.tools[name] {
		return false
	}
	for _, m := range t.match {
		v, ok := args.str(m.name)
		if !ok || !m.re.MatchString(v) {
			return false
		}
	}
	return true
}

// argsView decodes a call's arguments once, when a rule first needs them.
type argsView struct {
	raw    json.RawMessage
	parsed bool
	obj    map[string]json.RawMessage
	strs   map[string]*string // decoded string arguments; nil entry: not a string
}

// str returns the string value of top-level argument name; ok is false when the arguments are
// not an object, or the argument is missing or not a string.
func (a *argsView) str(name string) (string, bool) {
	if !a.parsed {
		a.parsed = true
		if json.Unmarshal(a.raw, &a.obj) != nil {
			a.obj = nil
		}
		a.strs = map[string]*string{}
	}
	if s, ok := a.strs[name]; ok {
		if s == nil {
			return "", false
		}
		return *s, true
	}
	raw, ok := a.obj[name]
	var s string
	if !ok || len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		a.strs[name] = nil
		return "", false
	}
	a.strs[name] = &s
	return s, true
}

// Empty reports whether the set has nothing to install.
func (s *Set) Empty() bool {
	return len(s.pre) == 0 && len(s.guards) == 0 && len(s.post) == 0 && s.preURL == "" && s.postURL == ""
}

// Env is what an installed set's webhooks need.
type Env struct {
	// Client calls the webhooks; nil makes every named webhook fail closed (policy webhooks
	// disabled on this server).
	Client *Client
	// Secret is the preset's signing secret (Secret).
	Secret string
	// PresetID and PresetVersion identify the preset version in the webhook requests.
	PresetID      string
	PresetVersion int
	// Logger receives webhook failures; nil discards.
	Logger *slog.Logger
}

// Install registers the set on f's scope: a tools/pre-execute listener for the pre-execute rules
// and webhook, one registry guard for the guards, a tools/post-execute listener for the
// post-execute rules and webhook. Disposing f undoes them. Install them before other
// pre-execute listeners of the scope (the preset's approval.ask): the first registered runs
// first, and a rule that fits decides without them.
func (s *Set) Install(f *kernel.Fiber, reg *registry.Registry, env Env) error {
	if env.Logger == nil {
		env.Logger = slog.New(slog.DiscardHandler)
	}
	if len(s.pre) > 0 || s.preURL != "" {
		fn := kernel.WaterfallFunc[*registry.Execution, registry.Decision](
			func(ctx context.Context, e *registry.Execution, next func(context.Context) (registry.Decision, error)) (registry.Decision, error) {
				if d, ok := s.preExecute(ctx, e, env); ok {
					return d, nil
				}
				return next(ctx)
			})
		if _, err := kernel.Listen(f, reg.Hooks.PreExecute, fn); err != nil {
			return err
		}
	}
	if len(s.guards) > 0 {
		if _, err := reg.Guard(f, s.guard); err != nil {
			return err
		}
	}
	if len(s.post) > 0 || s.postURL != "" {
		fn := kernel.WaterfallFunc[*registry.Call, registry.PostDecision](
			func(ctx context.Context, c *registry.Call, next func(context.Context) (registry.PostDecision, error)) (registry.PostDecision, error) {
				return s.postExecute(ctx, c, env, next)
			})
		if _, err := kernel.Listen(f, reg.Hooks.PostExecute, fn); err != nil {
			return err
		}
	}
	return nil
}

// preExecute returns the decision of the first fitting rule, else of the webhook; ok is false
// when neither decides.
func (s *Set) preExecute(ctx context.Context, e *registry.Execution, env Env) (registry.Decision, bool) {
	args := argsView{raw: e.Args}
	if d, ok := s.ruleDecision(e.Name, &args); ok {
		return d, true
	}
	if s.preURL == "" {
		return registry.Decision{}, false
	}
	return s.preWebhook(ctx, e, env), true
}

// ruleDecision returns the decision of the first pre-execute rule that fits a call of tool name
// with args; ok is false when none fits.
func (s *Set) ruleDecision(name string, args *argsView) (registry.Decision, bool) {
	for i := range s.pre {
		r := &s.pre[i]
		if !r.fits(name, args) {
			continue
		}
		switch r.decision {
		case DecisionDeny:
			if r.reason == "" {
				return registry.Deny(fmt.Sprintf("tool %q is denied by the preset's policy", name)), true
			}
			return registry.Deny(r.reason), true
		case DecisionAsk:
			return registry.Ask(r.reason), true
		default:
			return registry.Allow(), true
		}
	}
	return registry.Decision{}, false
}

// guard is the registry guard of the guard rules (GRD-1): the first fitting rule's reason.
func (s *Set) guard(e *registry.Execution) string {
	args := argsView{raw: e.Args}
	for i := range s.guards {
		r := &s.guards[i]
		if !r.fits(e.Name, &args) {
			continue
		}
		if r.reason == "" {
			return fmt.Sprintf("tool %q is blocked by the preset's guard", e.Name)
		}
		return r.reason
	}
	return ""
}

// postExecute applies the post-execute rules, then the webhook or the rest of the chain.
func (s *Set) postExecute(ctx context.Context, c *registry.Call, env Env,
	next func(context.Context) (registry.PostDecision, error)) (registry.PostDecision, error) {
	args := argsView{raw: c.Exec.Args}
	var contexts []llm.Message
	for i := range s.post {
		r := &s.post[i]
		if !r.fits(c.Exec.Name, &args) {
			continue
		}
		switch r.action {
		case ActionAddContext:
			contexts = append(contexts, contextMessage(r.text))
		case ActionBlock:
			return registry.PostDecision{Kind: registry.PostBlock, Feedback: []llm.Block{llm.TextBlock(r.text)},
				AdditionalContexts: contexts}, nil
		case ActionReplace:
			return registry.PostDecision{Content: []llm.Block{llm.TextBlock(r.text)}, AdditionalContexts: contexts}, nil
		}
	}
	var d registry.PostDecision
	decided := false
	if s.postURL != "" {
		d, decided = s.postWebhook(ctx, c, env)
	}
	if !decided {
		var err error
		if d, err = next(ctx); err != nil {
			return d, err
		}
	}
	if len(contexts) > 0 {
		d.AdditionalContexts = append(contexts, d.AdditionalContexts...)
	}
	return d, nil
}

// contextMessage is the user message of an addContext rule. Its id is fresh; the agent loop
// renames a context whose id is taken anyway (LOOP-1).
func contextMessage(text string) llm.Message {
	return llm.NewUserMessage("policy-context-"+uuid.NewString(), text)
}
