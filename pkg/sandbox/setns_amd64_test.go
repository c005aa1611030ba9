package sandbox_test

// sysSetns is setns(2) (the syscall package names it on every Linux architecture but amd64).
const sysSetns = 308
