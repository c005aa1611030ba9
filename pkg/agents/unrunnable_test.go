package agents_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/agents"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/preset"
)

// TestFinding10_UnrunnablePresetEndsItsTurns (issue 9, finding 10): a stored preset whose model
// provider the server can no longer build (its baseUrl host was removed from the model hosts;
// scripted while the scripted provider is off) still gets an agent, whose turns end at once with
// turn/end {kind: error, error: {code: NO_ADAPTER}} and no retry; its prompt fails with that
// error. Agent used to fail, and the worker retried the session's job for about three weeks
// while the message's stream hung.
func TestFinding10_UnrunnablePresetEndsItsTurns(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		edit func(*agents.Config)
		body string
		msg  string
	}{
		"scripted off": {func(c *agents.Config) { c.ScriptedDisabled = true },
			`{"name":"p","model":{"provider":"scripted","model":"m"}}`, "scripted model provider is disabled"},
		"host removed": {func(c *agents.Config) { c.ModelHosts = []string{"api.deepseek.com"} },
			`{"name":"p","model":{"provider":"openai","model":"m","baseUrl":"http://127.0.0.1:9/v1","retries":10}}`,
			"model baseUrl is not allowed"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a := newAgentsWith(t, tc.edit)
			p := presetOf(t, tc.body)
			evs := run(t, a, p, "hello") // Agent succeeds and the turn ends
			ends := find(evs, eventlog.TypeTurnEnd)
			if len(ends) != 1 || !strings.Contains(ends[0], `"kind":"error"`) || !strings.Contains(ends[0], `"code":"NO_ADAPTER"`) ||
				!strings.Contains(ends[0], tc.msg) {
				t.Fatalf("turn/end %v", ends)
			}
			if r := find(evs, eventlog.TypeLLMRetry); len(r) != 0 {
				t.Fatalf("retried: %v", r)
			}
			_, err := a.Prompt(context.Background(), agents.Session{ID: uuid.New(), Preset: p})
			var le *llm.Error
			if !errors.As(err, &le) || le.Code != llm.CodeNoAdapter || le.Retryable {
				t.Fatalf("prompt: %v, want a NO_ADAPTER *llm.Error", err)
			}
		})
	}
}

// TestFinding10_RulesRefuseWhatTheAgentsCannotRun (issue 9, finding 10): the agents' Rules,
// with which the server validates presets, refuse at write what the agents could not run: a
// scripted preset while the scripted provider is off (it was accepted with 201), a baseUrl host
// outside the agents' model hosts (their default included).
func TestFinding10_RulesRefuseWhatTheAgentsCannotRun(t *testing.T) {
	t.Parallel()
	scripted := `{"name":"p","model":{"provider":"scripted","model":"m"}}`
	deepseek := `{"name":"p","model":{"provider":"openai","model":"m","baseUrl":"https://api.deepseek.com/v1"}}`
	local := `{"name":"p","model":{"provider":"openai","model":"m","baseUrl":"http://127.0.0.1:9000/v1"}}`
	for _, tc := range []struct {
		edit  func(*agents.Config)
		body  string
		field string // "" means valid
	}{
		{func(*agents.Config) {}, scripted, ""},
		{func(c *agents.Config) { c.ScriptedDisabled = true }, scripted, "model.provider"},
		{func(*agents.Config) {}, deepseek, ""}, // the agents' default model host
		{func(*agents.Config) {}, local, "model.baseUrl"},
		{func(c *agents.Config) { c.ModelHosts = []string{"127.0.0.1:9000"} }, local, ""},
		{func(c *agents.Config) { c.ModelHosts = []string{"127.0.0.1:9000"} }, deepseek, "model.baseUrl"},
	} {
		a := newAgentsWith(t, tc.edit)
		b := presetOf(t, tc.body).Body
		err := a.Rules().Validate(&b)
		var ve *preset.ValidationError
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%s: %v", tc.body, err)
		case tc.field != "" && (!errors.As(err, &ve) || ve.Problems[0].Field != tc.field):
			t.Errorf("%s: %v, want a problem with %s", tc.body, err, tc.field)
		}
		// What the rules accept, the agents run.
		if err == nil {
			if err := runnable(a, presetOf(t, tc.body)); err != nil {
				t.Errorf("%s: accepted but not runnable: %v", tc.body, err)
			}
		}
	}
}
