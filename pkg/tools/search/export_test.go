package search

import "testing"

// SetWalkOpenHook makes the walks of glob and grep call hook before each open, with its path,
// until the test ends. A test that sets it must not run in parallel.
func SetWalkOpenHook(t testing.TB, hook func(p string)) {
	t.Helper()
	walkOpenHook = hook
	t.Cleanup(func() { walkOpenHook = nil })
}
