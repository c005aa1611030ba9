package policy

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/dshd/dshd/pkg/netguard"
)

// Limits of a policies block, checked by Check (pkg/preset refuses a preset beyond one: 400 at
// create and update) and listed in README.md (Limits) and openapi.yaml. Sizes are bytes of
// UTF-8.
const (
	MaxRules           = 64       // each of preExecute, guards and postExecute
	MaxRuleTools       = 256      // tools of one rule
	MaxToolNameBytes   = 128      // one entry of a rule's tools
	MaxMatchArgs       = 16       // entries of one rule's match
	MaxArgNameBytes    = 128      // a name of match
	MaxPatternBytes    = 1024     // a regexp of match
	MaxReasonBytes     = 1024     // reason of a pre-execute rule or guard
	MaxTextBytes       = 32 << 10 // feedback, content or context of a post-execute rule
	MaxPoliciesBytes   = 64 << 10 // every pattern, reason and text of the block together
	MaxWebhookURLBytes = 2048     // webhooks.preExecute, webhooks.postExecute
	MaxWebhookTimeout  = 30_000   // webhooks.timeoutMs (from 1), in milliseconds
)

// Rules are the deployment settings the check of a policies block depends on.
type Rules struct {
	// WebhooksEnabled allows webhook URLs (the operator has set a signing key); without it a
	// block naming a webhook is refused.
	WebhooksEnabled bool
	// AllowHTTP allows http:// webhook URLs (for tests); otherwise only https.
	AllowHTTP bool
	// AllowPrivate allows webhook hosts that are loopback, private, link-local or otherwise not
	// public addresses (for tests and private deployments).
	AllowPrivate bool
}

// maxEcho bounds how much of a value a message repeats (as pkg/preset's messages do).
const maxEcho = 64

// Check reports every problem of p through add (a field path below "policies" and a message).
// The regexps are compiled. p must be normalized.
func Check(p Policies, r Rules, add func(field, format string, args ...any)) {
	c := checker{add: add}
	c.count("policies.preExecute", len(p.PreExecute))
	for i, rule := range p.PreExecute {
		f := fmt.Sprintf("policies.preExecute[%d]", i)
		c.target(f, rule.Tools, rule.Match)
		switch rule.Decision {
		case DecisionAllow, DecisionDeny, DecisionAsk:
		case "":
			add(f+".decision", `is required ("allow", "deny" or "ask")`)
		default:
			add(f+".decision", `unknown decision %q (want "allow", "deny" or "ask")`, echo(rule.Decision))
		}
		if rule.Decision == DecisionAllow && rule.Reason != "" {
			add(f+".reason", `is only for the decisions "deny" and "ask"`)
		}
		c.text(f+".reason", rule.Reason, MaxReasonBytes)
	}
	c.count("policies.guards", len(p.Guards))
	for i, rule := range p.Guards {
		f := fmt.Sprintf("policies.guards[%d]", i)
		c.target(f, rule.Tools, rule.Match)
		c.text(f+".reason", rule.Reason, MaxReasonBytes)
	}
	c.count("policies.postExecute", len(p.PostExecute))
	for i, rule := range p.PostExecute {
		f := fmt.Sprintf("policies.postExecute[%d]", i)
		c.target(f, rule.Tools, rule.Match)
		c.post(f, rule)
	}
	if c.total > MaxPoliciesBytes {
		add("policies", "the patterns, reasons and texts must be at most %d bytes together (got %d)", MaxPoliciesBytes, c.total)
	}
	c.webhook("policies.webhooks.preExecute", p.Webhooks.PreExecute, r)
	c.webhook("policies.webhooks.postExecute", p.Webhooks.PostExecute, r)
	if t := p.Webhooks.TimeoutMs; t != nil && (*t < 1 || *t > MaxWebhookTimeout) {
		add("policies.webhooks.timeoutMs", "must be an integer >= 1 and <= %d (got %d)", MaxWebhookTimeout, *t)
	}
}

type checker struct {
	add   func(field, format string, args ...any)
	total int
}

func (c *checker) count(field string, n int) {
	if n > MaxRules {
		c.add(field, "must have at most %d rules (got %d)", MaxRules, n)
	}
}

// target checks a rule's tools and match.
func (c *checker) target(f string, tools []string, match map[string]string) {
	switch {
	case len(tools) == 0:
		c.add(f+".tools", `is required: name the tools, or ["*"] for all`)
	case len(tools) > MaxRuleTools:
		c.add(f+".tools", "must have at most %d entries (got %d)", MaxRuleTools, len(tools))
	case len(tools) > 1 && slices.Contains(tools, AllTools):
		c.add(f+".tools", `"*" must be the only entry`)
	}
	for i, t := range tools {
		if i == MaxRuleTools {
			break
		}
		switch {
		case strings.TrimSpace(t) == "":
			c.add(fmt.Sprintf("%s.tools[%d]", f, i), "must not be empty")
		case len(t) > MaxToolNameBytes:
			c.add(fmt.Sprintf("%s.tools[%d]", f, i), "must be at most %d bytes (got %d)", MaxToolNameBytes, len(t))
		}
	}
	if len(match) > MaxMatchArgs {
		c.add(f+".match", "must have at most %d arguments (got %d)", MaxMatchArgs, len(match))
		return
	}
	for _, name := range sortedKeys(match) {
		pattern := match[name]
		c.total += len(name) + len(pattern)
		switch {
		case name == "":
			c.add(f+".match", "an argument name must not be empty")
			continue
		case len(name) > MaxArgNameBytes:
			c.add(f+".match", "argument name %q must be at most %d bytes (got %d)", echo(name), MaxArgNameBytes, len(name))
			continue
		}
		field := f + ".match." + echo(name)
		if len(pattern) > MaxPatternBytes {
			c.add(field, "the regexp must be at most %d bytes (got %d)", MaxPatternBytes, len(pattern))
			continue
		}
		if _, err := regexp.Compile(pattern); err != nil {
			c.add(field, "invalid regexp: %s", echo(strings.TrimPrefix(err.Error(), "error parsing regexp: ")))
		}
	}
}

func (c *checker) text(field, s string, max int) {
	c.total += len(s)
	if len(s) > max {
		c.add(field, "must be at most %d bytes (got %d)", max, len(s))
	}
}

// post checks a post-execute rule's action and its one text.
func (c *checker) post(f string, rule PostRule) {
	texts := []struct{ name, action, value string }{
		{"feedback", ActionBlock, rule.Feedback},
		{"content", ActionReplace, rule.Content},
		{"context", ActionAddContext, rule.Context},
	}
	known := false
	for _, t := range texts {
		c.text(f+"."+t.name, t.value, MaxTextBytes)
		switch {
		case t.action == rule.Action:
			known = true
			if t.value == "" {
				c.add(f+"."+t.name, "is required by action %q", rule.Action)
			}
		case t.value != "":
			c.add(f+"."+t.name, "is only for action %q", t.action)
		}
	}
	switch {
	case known:
	case rule.Action == "":
		c.add(f+".action", `is required ("block", "replace" or "addContext")`)
	default:
		c.add(f+".action", `unknown action %q (want "block", "replace" or "addContext")`, echo(rule.Action))
	}
}

// webhook checks a webhook URL: absolute https (http only with Rules.AllowHTTP), no
// credentials or fragment, and a host that is not a loopback, private or link-local address
// unless Rules.AllowPrivate (names are resolved and checked again on every call).
func (c *checker) webhook(field, raw string, r Rules) {
	if raw == "" {
		return
	}
	if !r.WebhooksEnabled {
		c.add(field, "policy webhooks are disabled on this server (the operator has set no webhook signing key, DSHD_POLICY_WEBHOOK_KEY)")
		return
	}
	if len(raw) > MaxWebhookURLBytes {
		c.add(field, "must be at most %d bytes (got %d)", MaxWebhookURLBytes, len(raw))
		return
	}
	if err := CheckURL(raw, r.AllowHTTP, r.AllowPrivate); err != nil {
		c.add(field, "%s", err.Error())
	}
}

// CheckURL checks a webhook URL as Check does (netguard.CheckURL, shared with tenant webhooks).
// Its error messages repeat at most a short prefix of the URL's parts.
func CheckURL(raw string, allowHTTP, allowPrivate bool) error {
	return netguard.CheckURL(raw, allowHTTP, allowPrivate)
}

// echo returns s for a message: at most maxEcho bytes, cut at a rune boundary and marked with
// "…" when cut.
func echo(s string) string { return clip(s, maxEcho) }

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
