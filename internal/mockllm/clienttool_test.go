package mockllm_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestE6_ScriptCallsAClientTool: a script names a client-executed tool like any tool (tool:NAME):
// the answer calls the tool the request offers under that name, with the script's arguments, and
// the next request, which carries the client's result as the call's tool message, counts it and
// gets the final text.
func TestE6_ScriptCallsAClientTool(t *testing.T) {
	t.Parallel()
	_, url := start(t)
	const tools = `"tools":[{"type":"function","function":{"name":"ask_user","description":"Asks the user.",
		"parameters":{"type":"object","properties":{"question":{"type":"string"}}}}}]`
	script := `{"role":"user","content":"tool:ask_user args:{\"question\":\"Ship?\"}"}`
	resp, data := post(t, url+"/v1/chat/completions", `{"model":"m",`+tools+`,"messages":[`+script+`]}`)
	var first struct {
		Choices []struct {
			Message struct {
				ToolCalls []struct {
					ID       string `json:"id"`
					Function struct {
						Name      string `json:"name"`
						Arguments string `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if resp.StatusCode != 200 || json.Unmarshal([]byte(data), &first) != nil || len(first.Choices) != 1 {
		t.Fatalf("first step: %d %s", resp.StatusCode, data)
	}
	calls := first.Choices[0].Message.ToolCalls
	if len(calls) != 1 || calls[0].Function.Name != "ask_user" || calls[0].Function.Arguments != `{"question":"Ship?"}` ||
		first.Choices[0].FinishReason != "tool_calls" {
		t.Fatalf("first step calls %+v, finish %q", calls, first.Choices[0].FinishReason)
	}
	call, _ := json.Marshal(map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
		"id": calls[0].ID, "type": "function", "function": map[string]string{"name": "ask_user", "arguments": calls[0].Function.Arguments}}}})
	result := `{"role":"tool","tool_call_id":"` + calls[0].ID + `","content":"yes, ship it"}`
	resp, data = post(t, url+"/v1/chat/completions", `{"model":"m",`+tools+`,"messages":[`+script+`,`+string(call)+`,`+result+`]}`)
	if resp.StatusCode != 200 || !strings.Contains(data, "Done after 1 steps and 1 tool results.") {
		t.Fatalf("after the client's result: %d %s", resp.StatusCode, data)
	}
}
