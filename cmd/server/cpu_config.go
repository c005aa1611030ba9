package main

import (
	"fmt"
	"runtime"

	"github.com/dshd/dshd/pkg/codemode"
	"github.com/dshd/dshd/pkg/fairq"
)

// CPUSettings bound how many of the replica's cores tenant code takes at once (docs/sandbox.md,
// "CPU"): run_code programs, which compute in the server process, and bash's sandboxed commands.
// Past a bound, a program or command waits its turn in a queue that serves tenants round robin.
// Their defaults follow the cores of this process (defaultCPUSettings).
type CPUSettings struct {
	// CodeMaxConcurrent is codemode.Config.MaxConcurrent.
	CodeMaxConcurrent int `env:"DSHD_CODE_MAX_CONCURRENT" min:"1" max:"10000" defaultdoc:"half the replica's cores («GOMAXPROCS»), at least 1" doc:"«run_code» programs that run JavaScript at once on a replica; more wait their turn, tenants served round robin (see [docs/sandbox.md](docs/sandbox.md), \"CPU\")"`
	BashMaxConcurrent int `env:"DSHD_BASH_MAX_CONCURRENT" min:"1" max:"10000" defaultdoc:"twice the cores, at least 4" doc:"«bash» commands that run at once on a replica, all tenants together; more wait their turn, tenants served round robin"`
	// BashMaxPerTenant is at most BashMaxConcurrent.
	BashMaxPerTenant int `env:"DSHD_BASH_MAX_PER_TENANT" min:"0" max:"10000" zero:"half of DSHD_BASH_MAX_CONCURRENT" defaultdoc:"half of «DSHD_BASH_MAX_CONCURRENT», at least 1" doc:"«bash» commands of one tenant that run at once on a replica"`
}

// defaultCPUSettings are the settings' defaults on the cores of this process; BashMaxPerTenant 0
// is filled in by check.
func defaultCPUSettings() CPUSettings {
	return CPUSettings{CodeMaxConcurrent: codemode.DefaultMaxConcurrent(), BashMaxConcurrent: max(2*runtime.GOMAXPROCS(0), 4)}
}

// check fills in BashMaxPerTenant's default and checks it against BashMaxConcurrent.
func (c *CPUSettings) check() error {
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
