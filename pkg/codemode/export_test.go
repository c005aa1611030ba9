package codemode

// OnQueued makes rt call f whenever a run_code call starts waiting for a program slot.
func OnQueued(rt *Runtime, f func()) { rt.onQueued = f }
