package eventlog

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/dshd/dshd/pkg/llm"
)

func checkTurn(turn int) error {
	if turn < 1 {
		return errors.New("turn must be an integer >= 1")
	}
	return nil
}

func checkStep(turn, step int) error {
	if err := checkTurn(turn); err != nil {
		return err
	}
	if step < 1 {
		return errors.New("step must be an integer >= 1")
	}
	return nil
}

// Validate implements Payload.
func (p TurnStart) Validate() error { return checkTurn(p.Turn) }

// Validate implements Payload.
func (p TurnEnd) Validate() error {
	if err := checkTurn(p.Turn); err != nil {
		return err
	}
	if p.Reason.Kind == "" {
		return errors.New("reason must be an object with a kind")
	}
	return nil
}

// Validate implements Payload.
func (p StepStart) Validate() error { return checkStep(p.Turn, p.Step) }

// Validate implements Payload.
func (p StepEnd) Validate() error { return checkStep(p.Turn, p.Step) }

// Validate implements Payload.
func (p UserMessage) Validate() error {
	if p.Role != llm.RoleUser {
		return errors.New("a user/message must have role user")
	}
	return p.Message.Validate()
}

// Validate implements Payload.
func (p AssistantChunk) Validate() error {
	if err := checkStep(p.Turn, p.Step); err != nil {
		return err
	}
	if p.Chunk == nil {
		return errors.New("chunk must be an object")
	}
	return nil
}

// Validate implements Payload.
func (p AssistantMessage) Validate() error {
	if err := checkStep(p.Turn, p.Step); err != nil {
		return err
	}
	if p.Message.Role != llm.RoleAssistant {
		return errors.New("message must have role assistant")
	}
	return p.Message.Validate()
}

// Validate implements Payload.
func (p ToolCall) Validate() error {
	if err := checkStep(p.Turn, p.Step); err != nil {
		return err
	}
	if p.CallID == "" || p.Name == "" {
		return errors.New("callId and name must be non-empty strings")
	}
	if p.noArguments {
		return errors.New("arguments must be a string")
	}
	return nil
}

// Validate implements Payload.
func (p ToolResult) Validate() error {
	if err := checkStep(p.Turn, p.Step); err != nil {
		return err
	}
	m := p.Message
	if m.Role != llm.RoleUser || m.Source.Kind != llm.SourceTool {
		return errors.New("message must have role user and source {kind:'tool', callId}")
	}
	if err := m.Validate(); err != nil {
		return err
	}
	if p.Error != nil && (p.Error.Name == "" || p.Error.Code == "") {
		return errors.New("error must be {name, code}")
	}
	return nil
}

// Validate implements Payload.
func (p TodoWrite) Validate() error {
	if p.Todos == nil {
		return errors.New("todos must be an array")
	}
	for i, t := range p.Todos {
		if t.Content == "" || t.Status == "" {
			return fmt.Errorf("todos[%d] needs content and status strings", i)
		}
	}
	return nil
}

// Validate implements Payload: SES-12, the config carries provider and model, and adapterDefaults
// markers are true only for fields present in the config.
func (p RequestHeader) Validate() error {
	c := p.Header.Config
	if c.Provider == "" || c.Model == "" {
		return errors.New("header.config must carry provider and model")
	}
	present := map[string]bool{"provider": true, "model": true, "baseUrl": c.BaseURL != "",
		"maxTokens": c.MaxTokens != 0, "temperature": c.Temperature != nil,
		"reasoningEffort": c.ReasoningEffort != ""}
	for k, v := range p.Header.AdapterDefaults {
		if v && !present[k] {
			return fmt.Errorf("adapterDefaults.%s is true but config has no %s", k, k)
		}
	}
	if p.Reason == "" {
		return errors.New("reason is required")
	}
	return nil
}

// Validate implements Payload.
func (p RequestContext) Validate() error {
	if p.Provider == "" || p.Model == "" {
		return errors.New("provider and model are required")
	}
	if p.ContextWindow < 0 {
		return errors.New("contextWindow must be non-negative")
	}
	return nil
}

// Validate implements Payload.
func (SessionEndSeed) Validate() error { return nil }

// Validate implements Payload.
func (p InboxSpliced) Validate() error {
	switch {
	case p.Target != InboxNextTurn && p.Target != InboxNextStep:
		return errors.New("target must be next-turn or next-step")
	case p.Start < 0:
		return errors.New("start must be a non-negative integer")
	case p.RemovedCount != nil && *p.RemovedCount < 0:
		return errors.New("removedCount must be a non-negative integer")
	case p.Inserted == nil:
		return errors.New("inserted must be an array")
	}
	for i, m := range p.Inserted {
		if m.Role != llm.RoleUser {
			return fmt.Errorf("inserted[%d] must be a user message", i)
		}
		if err := m.Validate(); err != nil {
			return fmt.Errorf("inserted[%d]: %w", i, err)
		}
	}
	return nil
}

// Validate implements Payload.
func (p ApprovalAsked) Validate() error {
	if p.ID == "" || p.ToolName == "" {
		return errors.New("id and toolName must be non-empty strings")
	}
	return nil
}

// Approval outcomes (APR-1).
const (
	ApprovalAllowedOnce = "allowed-once"
	ApprovalRejected    = "rejected"
	ApprovalCancelled   = "cancelled"
	ApprovalUnavailable = "unavailable"
)

// Validate implements Payload.
func (p ApprovalDecided) Validate() error {
	if p.ID == "" || p.Outcome == "" {
		return errors.New("id and outcome must be non-empty strings")
	}
	return nil
}

// Validate implements Payload.
func (p ApprovalPolicy) Validate() error {
	if p.Policy == "" {
		return errors.New("policy must be a non-empty string")
	}
	return nil
}

// Validate implements Payload.
func (p CodeDispatchStart) Validate() error {
	if p.RootCallID == "" || p.ParentCallID == "" || p.SubCallID == "" || p.Name == "" {
		return errors.New("rootCallId, parentCallId, subCallId and name are required")
	}
	if len(p.Arguments) == 0 {
		return errors.New("arguments are required")
	}
	return nil
}

// Validate implements Payload.
func (p CodeDispatch) Validate() error {
	if err := p.CodeDispatchStart.Validate(); err != nil {
		return err
	}
	if p.Content == nil {
		return errors.New("isError and content are required")
	}
	return nil
}

// Validate implements Payload.
func (p LLMRetry) Validate() error {
	if err := checkStep(p.Turn, p.Step); err != nil {
		return err
	}
	if p.DelayMs < 0 {
		return errors.New("delayMs must be a number >= 0")
	}
	if p.Code == "" && (p.Failure == nil || p.Failure.Code == "") {
		return errors.New("code must be a non-empty string")
	}
	return nil
}

// Validate implements Payload.
func (p AgentCancel) Validate() error {
	if p.Reason.Kind == "" {
		return errors.New("reason must be an object with a kind")
	}
	return nil
}

// Validate implements Payload.
func (p TurnTrace) Validate() error {
	if err := checkTurn(p.Turn); err != nil {
		return err
	}
	if len(p.TraceID) != 32 || strings.Trim(p.TraceID, "0123456789abcdef") != "" {
		return errors.New("traceId must be 32 lowercase hex digits")
	}
	return nil
}

// Validate implements Payload.
func (p AssistantUsage) Validate() error {
	if err := checkStep(p.Turn, p.Step); err != nil {
		return err
	}
	u := p.Usage
	if u.InputTokens < 0 || u.OutputTokens < 0 || u.CacheReadTokens < 0 || u.CacheMissTokens < 0 || u.ReasoningTokens < 0 {
		return errors.New("usage counts must be integers >= 0")
	}
	return nil
}

// UnmarshalJSON implements json.Unmarshaler: it notes a missing arguments string, which Validate
// refuses (SES-8: arguments is the model's raw string, possibly empty, never absent).
func (p *ToolCall) UnmarshalJSON(b []byte) error {
	type plain ToolCall
	var d struct {
		plain
		Arguments *string `json:"arguments"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return err
	}
	*p = ToolCall(d.plain)
	if d.Arguments != nil {
		p.Arguments = *d.Arguments
	}
	p.noArguments = d.Arguments == nil
	return nil
}
