package codemode

import "github.com/dshd/dshd/pkg/fairq"

// OnQueued makes rt call f whenever a run_code call starts waiting for its first program slot.
func OnQueued(rt *Runtime, f func()) { rt.onQueued = f }

// Slots returns rt's program slots.
func Slots(rt *Runtime) *fairq.Queue { return rt.slots }
