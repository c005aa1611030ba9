package agents_test

import (
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/mockllm"
	"github.com/dshd/dshd/pkg/agentloop"
	"github.com/dshd/dshd/pkg/agents"
	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/llm/openai"
)

// TestOperatorKeyNotLentWithoutFallback: with NoOperatorKeyFallback, a DeepSeek preset without a
// credential ends its turn with INVALID_CREDENTIAL and no client is ever built with the
// operator's key; a preset pointing elsewhere still calls, without a key.
func TestOperatorKeyNotLentWithoutFallback(t *testing.T) {
	t.Parallel()
	ms := mockllm.New(mockllm.Config{})
	srv := httptest.NewServer(ms.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(ms.Close)
	u, _ := url.Parse(srv.URL)
	var keys sync.Map // keys of the clients built
	a, err := agents.New(agents.Config{ModelHosts: []string{u.Host, "api.deepseek.com"}, DeepSeekAPIKey: "sk-operator-key",
		NoOperatorKeyFallback: true, Loop: agentloop.Config{RetryBackoff: time.Millisecond},
		OpenAIFunc: func(c openai.Config) llm.Provider {
			keys.Store(c.APIKey, true)
			return openai.New(c)
		}})
	if err != nil {
		t.Fatal(err)
	}
	evs := run(t, a, presetOf(t, `{"name":"p","model":{"provider":"deepseek","model":"deepseek-chat"}}`), "text")
	if ends := find(evs, eventlog.TypeTurnEnd); len(ends) != 1 || !strings.Contains(ends[0], "INVALID_CREDENTIAL") ||
		!strings.Contains(ends[0], "model.credential") {
		t.Fatalf("turn/end %v", ends)
	}
	evs = run(t, a, presetOf(t, `{"name":"p","model":{"provider":"openai","model":"m","baseUrl":"`+srv.URL+`/v1"}}`), "text")
	if ends := find(evs, eventlog.TypeTurnEnd); len(ends) != 1 || !strings.Contains(ends[0], `"completed"`) {
		t.Fatalf("turn/end %v", ends)
	}
	if calls := ms.Calls(); len(calls) != 1 || calls[0].Authorization != "" {
		t.Fatalf("calls %+v", calls)
	}
	if _, lent := keys.Load("sk-operator-key"); lent {
		t.Fatal("a client was built with the operator's key")
	}
}
