//go:build !linux

package e2e

import "syscall"

// childAttr: outside Linux, children are stopped only by the tests' cleanups.
func childAttr() *syscall.SysProcAttr { return nil }
