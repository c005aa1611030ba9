//go:build linux && !amd64

package sandbox_test

import "syscall"

const sysSetns = syscall.SYS_SETNS
