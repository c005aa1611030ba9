package agents

import (
	"context"

	"github.com/dshd/dshd/pkg/registry"
)

// ScopeCounts returns how many preset-version scopes are set up and how many of them are idle.
func (a *Agents) ScopeCounts() (live, idle int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.scopes), a.idle.Len()
}

// ClientCount returns how many model clients are cached.
func (a *Agents) ClientCount() int {
	ms := a.models.(*models)
	ms.mu.Lock()
	defer ms.mu.Unlock()
	return len(ms.clients)
}

// Approve is the approver the agents mount on their registry.
func (a *Agents) Approve(ctx context.Context, req registry.ApprovalRequest) (string, error) {
	return a.approve(ctx, req)
}

// SetSetupHook sets the func called in the middle of every scope's setup, outside the agents'
// lock. Call it before any Agent call.
func (a *Agents) SetSetupHook(f func(key string)) { a.setupHook = f }
