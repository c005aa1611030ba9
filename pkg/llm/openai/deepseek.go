package openai

import "github.com/dshd/dshd/pkg/llm"

// DeepSeek's defaults, the "deepseek" provider's: the OpenAI wire of this client (reasoning
// arrives and is sent back as reasoning_content) at DefaultBaseURL, with the output cap,
// reasoning effort and context window of DeepSeek's current models, as the reference harness's
// DeepSeek adapter declares them.
const (
	DeepSeekMaxTokens       = 256_000
	DeepSeekReasoningEffort = "off" // no reasoning_effort on the wire: the model's own default
	DeepSeekContextWindow   = 1_000_000
)

// DeepSeekDefaults returns the defaults of the "deepseek" provider. The "openai" provider
// declares none: its requests carry only what the preset sets.
func DeepSeekDefaults() llm.Defaults {
	return llm.Defaults{MaxTokens: DeepSeekMaxTokens, ReasoningEffort: DeepSeekReasoningEffort,
		ContextWindow: DeepSeekContextWindow}
}
