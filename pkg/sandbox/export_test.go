package sandbox

import "testing"

// SetWalkOpenHook makes every host-side walk of a workspace call hook between the listing of an
// entry and its open, with the entry's slash-separated path relative to the walk's root, until
// the test ends. The hook is one package variable: a test that sets it must not run in parallel
// (its cleanup clears the hook before the parallel tests start).
func SetWalkOpenHook(t testing.TB, hook func(rel string)) {
	t.Helper()
	walkOpenHook = hook
	t.Cleanup(func() { walkOpenHook = nil })
}

// SetSharedUsageHooks makes the shared measurements of w's tenants (Workspace.TenantUsage) call
// onMeasure when one starts a measurement and onJoin when one joins a measurement under way. Set
// them before w is used.
func SetSharedUsageHooks(w *Workspaces, onMeasure, onJoin func()) {
	w.onMeasure, w.onJoin = onMeasure, onJoin
}
