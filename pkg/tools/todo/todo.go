// Package todo is the `todo_write` tool: it replaces the session's whole todo list and logs it
// as a `todo/write {todos}` event, committed while the call runs.
package todo

import (
	"context"
	"fmt"
	"strings"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/registry"
)

// Item is one todo.
type Item struct {
	Content string `json:"content" jsonschema:"required,description=What to do."`
	Status  string `json:"status" jsonschema:"required,enum=pending,enum=in_progress,enum=completed,description=Where it stands."`
}

// Args are the arguments of `todo_write`.
type Args struct {
	Todos []Item `json:"todos" jsonschema:"required,description=The complete new todo list; it replaces the previous one."`
}

// EventType is the session event the tool logs.
const EventType = eventlog.TypeTodoWrite

// Tool returns a fresh definition of `todo_write`.
func Tool() (*registry.Tool, error) {
	return registry.Define(registry.DefineSpec[Args, Args]{
		Name: "todo_write",
		Description: "Replace the session's todo list with the given items. Use it to plan multi-step work " +
			"and to mark progress; send the whole list every time.",
		Render: func(_ Args, out Args) ([]llm.Block, error) { return []llm.Block{llm.TextBlock(render(out.Todos))}, nil },
	}, func(ctx context.Context, exec *registry.Execution, a Args) (Args, error) {
		for i, t := range a.Todos {
			if strings.TrimSpace(t.Content) == "" {
				return Args{}, registry.NewError("ToolArgsError", fault.CodeInvalidArgs,
					"invalid arguments: \"todos[%d].content\" must be a non-empty string", i)
			}
		}
		if a.Todos == nil {
			a.Todos = []Item{}
		}
		todos := make([]eventlog.Todo, len(a.Todos))
		for i, t := range a.Todos {
			todos[i] = eventlog.Todo{Content: t.Content, Status: t.Status}
		}
		if _, err := exec.Commit(ctx, eventlog.Of(eventlog.TodoWrite{Todos: todos})); err != nil {
			return Args{}, fmt.Errorf("todo_write: %w", err)
		}
		return a, nil
	})
}

func render(items []Item) string {
	if len(items) == 0 {
		return "Todo list cleared."
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Todo list updated (%d items):", len(items))
	mark := map[string]string{"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}
	for _, t := range items {
		fmt.Fprintf(&b, "\n%s %s", mark[t.Status], t.Content)
	}
	return b.String()
}
