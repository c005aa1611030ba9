// Package policy makes the tool pipeline's hook points declarative: a preset's `policies` block
// (the README's "Tool policies") of pre-execute rules, guards and post-execute rules, and the policy
// webhooks a preset may name. It defines the block's JSON shape (Policies, which pkg/preset
// embeds), checks it (Check, for preset validation), compiles it (Compile) and installs it on a
// preset's registry scope (Set.Install), where each rule yields exactly the results of the
// pipeline rules it stands for: a deny or a guard the PIPE-5 failure `Error: <reason>` with
// {ToolDeniedError, TOOL_DENIED} (extension E1, docs/rules.md), an ask the approval path (APR-1), a block
// the PIPE-15 failure whose content is the feedback.
//
// Rules: every rule names the tools it applies to (`["*"]` for all) and may match the call's
// arguments with `match: {argName: "regexp"}`. A rule fits a call when the tool is named and every
// regexp of match finds a match in the string value of its top-level argument (RE2 syntax,
// unanchored: write `^...$` to match the whole value). An argument that is missing or is not a
// JSON string does not match, so a rule with a match never fits such a call.
//
//   - preExecute rules are evaluated in order; the first that fits decides: `deny` (the call
//     fails with `Error: <reason>`), `ask` (the call asks for approval with the reason, through
//     the preset's approval settings), or `allow` (later rules, the pre-execute webhook and the
//     preset's approval.ask are skipped; the guards still run). When no rule fits, the
//     pre-execute webhook decides if one is named; otherwise the call goes on to approval.ask
//     and the default (allow).
//   - guards deny a call that fits one of them with `Error: <reason>`, while the tool stays
//     visible to the model. They run after pre-execute and approval, and nothing overrides them
//     (GRD-1..3): an allow, even a policy's, does not skip them.
//   - postExecute rules see every result that reaches post-execute (successes, tool failures,
//     and denials, PIPE-5). They are evaluated in order: each fitting `addContext` rule adds its
//     text as a user message delivered at the start of the next step (LOOP-6) and evaluation
//     goes on; the first fitting `block` (the result becomes a failure whose content and message
//     are the feedback text) or `replace` (the content becomes the text; value, meta and
//     isError are kept) decides. When none decides, the post-execute webhook decides if one is
//     named. The contexts of addContext rules are kept by a block, as its own contexts.
//
// Webhooks are called with a signed JSON body (Client, Sign) and fail closed: a timeout, a
// transport error, a blocked address or a non-2xx answer denies the call (pre-execute) or
// blocks its result (post-execute) with a reason that says so. The pre-execute webhook is asked
// once per SCHED-2 group, for all the group's calls no rule decides (extension E5, batch.go).
package policy

// Pre-execute decisions, post-execute actions and the tool wildcard.
const (
	DecisionAllow = "allow"
	DecisionDeny  = "deny"
	DecisionAsk   = "ask"

	ActionBlock      = "block"
	ActionReplace    = "replace"
	ActionAddContext = "addContext"
	// ActionAccept is the post-execute webhook's answer that keeps the result.
	ActionAccept = "accept"

	// AllTools, as a rule's only tool, applies the rule to every tool.
	AllTools = "*"
)

// DefaultWebhookTimeoutMs is the default of Webhooks.TimeoutMs: 2 seconds.
const DefaultWebhookTimeoutMs = 2000

// Policies is a preset's `policies` block. After Normalize every list and map is non-nil and
// Webhooks.TimeoutMs is set.
type Policies struct {
	PreExecute  []PreRule   `json:"preExecute"`
	Guards      []GuardRule `json:"guards"`
	PostExecute []PostRule  `json:"postExecute"`
	Webhooks    Webhooks    `json:"webhooks"`
}

// PreRule is a pre-execute rule: the first that fits a call decides it.
type PreRule struct {
	Tools    []string          `json:"tools"`
	Match    map[string]string `json:"match"`
	Decision string            `json:"decision"`
	// Reason is the deny reason (default `tool "<n>" is denied by the preset's policy`) or the
	// ask reason (optional).
	Reason string `json:"reason"`
}

// GuardRule is a guard: a call that fits it is denied with Reason (default `tool "<n>" is
// blocked by the preset's guard`).
type GuardRule struct {
	Tools  []string          `json:"tools"`
	Match  map[string]string `json:"match"`
	Reason string            `json:"reason"`
}

// PostRule is a post-execute rule. Feedback is for action block, Content for replace, Context
// for addContext; each is required by its action and refused by the others.
type PostRule struct {
	Tools    []string          `json:"tools"`
	Match    map[string]string `json:"match"`
	Action   string            `json:"action"`
	Feedback string            `json:"feedback,omitempty"`
	Content  string            `json:"content,omitempty"`
	Context  string            `json:"context,omitempty"`
}

// Webhooks name the policy webhooks of a preset: URLs called for the calls no rule decides
// (pre-execute) and the results no rule decides (post-execute). TimeoutMs bounds each call.
type Webhooks struct {
	PreExecute  string `json:"preExecute,omitempty"`
	PostExecute string `json:"postExecute,omitempty"`
	TimeoutMs   *int   `json:"timeoutMs"`
}

// Normalize fills the defaults of what p leaves out. It does not validate.
func (p *Policies) Normalize() {
	if p.PreExecute == nil {
		p.PreExecute = []PreRule{}
	}
	if p.Guards == nil {
		p.Guards = []GuardRule{}
	}
	if p.PostExecute == nil {
		p.PostExecute = []PostRule{}
	}
	// Only nil fields are written: a normalized block is never modified.
	for i := range p.PreExecute {
		nonNilMap(&p.PreExecute[i].Match)
	}
	for i := range p.Guards {
		nonNilMap(&p.Guards[i].Match)
	}
	for i := range p.PostExecute {
		nonNilMap(&p.PostExecute[i].Match)
	}
	if p.Webhooks.TimeoutMs == nil {
		n := DefaultWebhookTimeoutMs
		p.Webhooks.TimeoutMs = &n
	}
}

// Empty reports whether p has no rule and no webhook.
func (p *Policies) Empty() bool {
	return len(p.PreExecute) == 0 && len(p.Guards) == 0 && len(p.PostExecute) == 0 &&
		p.Webhooks.PreExecute == "" && p.Webhooks.PostExecute == ""
}

func nonNilMap(m *map[string]string) {
	if *m == nil {
		*m = map[string]string{}
	}
}
