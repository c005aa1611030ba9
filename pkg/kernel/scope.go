package kernel

import (
	"fmt"
	"sync"
)

// Scope is a node of the scope tree: a key such as "preset:x" or "agent:y" and an optional
// parent. Scopes are immutable once declared; compare them by pointer. A nil *Scope is the
// unscoped (global) position.
type Scope struct {
	key    string
	parent *Scope
}

// Key returns the scope's key.
func (s *Scope) Key() string {
	if s == nil {
		return ""
	}
	return s.key
}

// Parent returns the parent scope, or nil for a root scope.
func (s *Scope) Parent() *Scope {
	if s == nil {
		return nil
	}
	return s.parent
}

// Within reports whether s is anc or a descendant of anc. Nothing is within a nil ancestor
// except nil itself.
func (s *Scope) Within(anc *Scope) bool {
	for c := s; c != nil; c = c.parent {
		if c == anc {
			return true
		}
	}
	return s == anc
}

// Chain returns s and its ancestors, nearest first. The chain of nil is empty.
func (s *Scope) Chain() []*Scope {
	var out []*Scope
	for c := s; c != nil; c = c.parent {
		out = append(out, c)
	}
	return out
}

// ScopeTree holds the declared scopes by key. It is safe for concurrent use.
type ScopeTree struct {
	mu   sync.RWMutex
	byID map[string]*Scope
}

// NewScopeTree returns an empty tree.
func NewScopeTree() *ScopeTree { return &ScopeTree{byID: map[string]*Scope{}} }

// Declare returns the scope with key under parent (nil for a root), creating it on first use.
// Declaring an existing key again with the same parent returns the same scope; with a different
// parent it is an error, so the tree can never form a cycle.
func (t *ScopeTree) Declare(key string, parent *Scope) (*Scope, error) {
	if key == "" {
		return nil, fmt.Errorf("kernel: scope key must be non-empty")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if s, ok := t.byID[key]; ok {
		if s.parent != parent {
			return nil, fmt.Errorf("kernel: scope %q already declared under %q", key, s.parent.Key())
		}
		return s, nil
	}
	if parent != nil && t.byID[parent.key] != parent {
		return nil, fmt.Errorf("kernel: parent scope %q is not declared in this tree", parent.key)
	}
	s := &Scope{key: key, parent: parent}
	t.byID[key] = s
	return s, nil
}

// Lookup returns the declared scope for key. The empty key is the unscoped position (nil, true).
// An undeclared key returns a fresh detached root scope that no registration can be filed in,
// and false.
func (t *ScopeTree) Lookup(key string) (*Scope, bool) {
	if key == "" {
		return nil, true
	}
	t.mu.RLock()
	s, ok := t.byID[key]
	t.mu.RUnlock()
	if ok {
		return s, true
	}
	return &Scope{key: key}, false
}
