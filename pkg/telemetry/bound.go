package telemetry

import "sync"

// Other is the label value of everything a Bound does not keep.
const Other = "other"

// maxValueLen is the longest label value a Bound keeps.
const maxValueLen = 64

// Bound keeps a label's value set bounded: the values it was made with, then the first distinct
// values it sees up to its limit (none when it was made with a fixed list); every other value,
// and any value longer than 64 bytes or not printable ASCII, reads as Other. It is safe for
// concurrent use.
type Bound struct {
	mu     sync.RWMutex
	seen   map[string]bool
	limit  int
	frozen bool
}

// NewBound returns a Bound that keeps up to limit values, or exactly fixed when fixed is given.
func NewBound(limit int, fixed ...string) *Bound {
	b := &Bound{seen: map[string]bool{}, limit: limit, frozen: len(fixed) > 0}
	for _, v := range fixed {
		b.seen[v] = true
	}
	return b
}

// Of returns the label value for v.
func (b *Bound) Of(v string) string {
	if v == "" {
		return "unknown"
	}
	b.mu.RLock()
	ok := b.seen[v]
	full := b.frozen || len(b.seen) >= b.limit
	b.mu.RUnlock()
	if ok {
		return v
	}
	if full || !printable(v) {
		return Other
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seen[v] {
		return v
	}
	if len(b.seen) >= b.limit {
		return Other
	}
	b.seen[v] = true
	return v
}

func printable(v string) bool {
	if len(v) > maxValueLen {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < ' ' || v[i] > '~' {
			return false
		}
	}
	return true
}
