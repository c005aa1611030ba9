package main

import (
	"fmt"
	"runtime"
	"strconv"

	"github.com/dshd/dshd/pkg/codemode"
	"github.com/dshd/dshd/pkg/fairq"
)

// CPUSettings bound how many of the replica's cores tenant code takes at once (docs/sandbox.md,
// "CPU"): run_code programs, which compute in the server process, and bash's sandboxed commands.
// Past a bound, a program or command waits its turn in a queue that serves tenants round robin.
type CPUSettings struct {
	// CodeMaxConcurrent (DSHD_CODE_MAX_CONCURRENT) bounds the run_code programs that run
	// JavaScript at once on this replica (codemode.Config.MaxConcurrent). Default: half the
	// cores the process may use (codemode.DefaultMaxConcurrent), at least 1.
	CodeMaxConcurrent int
	// BashMaxConcurrent (DSHD_BASH_MAX_CONCURRENT) bounds the bash commands that run at once on
	// this replica, of all tenants. Default: twice the cores, at least 4.
	BashMaxConcurrent int
	// BashMaxPerTenant (DSHD_BASH_MAX_PER_TENANT) bounds those of one tenant, at most
	// BashMaxConcurrent. Default: half of BashMaxConcurrent, at least 1.
	BashMaxPerTenant int
}

// parse reads the settings; an unset one takes its default from the cores of this process.
func (c *CPUSettings) parse(env func(name, def string) string) error {
	cores := runtime.GOMAXPROCS(0)
	total := max(2*cores, 4)
	for _, s := range []struct {
		name string
		def  int
		to   *int
	}{
		{"DSHD_CODE_MAX_CONCURRENT", codemode.DefaultMaxConcurrent(), &c.CodeMaxConcurrent},
		{"DSHD_BASH_MAX_CONCURRENT", total, &c.BashMaxConcurrent},
		{"DSHD_BASH_MAX_PER_TENANT", 0, &c.BashMaxPerTenant},
	} {
		n, err := strconv.Atoi(env(s.name, strconv.Itoa(s.def)))
		if err != nil || n < 0 || (n == 0 && s.def != 0) || n > 10000 {
			return fmt.Errorf("%s must be an integer from 1 to 10000", s.name)
		}
		*s.to = n
	}
	if c.BashMaxPerTenant == 0 {
		c.BashMaxPerTenant = max(c.BashMaxConcurrent/2, 1)
	}
	if c.BashMaxPerTenant > c.BashMaxConcurrent {
		return fmt.Errorf("DSHD_BASH_MAX_PER_TENANT (%d) must not be more than DSHD_BASH_MAX_CONCURRENT (%d)", c.BashMaxPerTenant, c.BashMaxConcurrent)
	}
	return nil
}

// commandSlots is the queue of bash's command slots.
func (c CPUSettings) commandSlots() (*fairq.Queue, error) {
	return fairq.New(c.BashMaxConcurrent, c.BashMaxPerTenant)
}
