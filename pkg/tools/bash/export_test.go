package bash

// WithOnQueued returns cfg whose tool calls f whenever a command starts waiting for a slot.
func WithOnQueued(cfg Config, f func()) Config { cfg.onQueued = f; return cfg }
