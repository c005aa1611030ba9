package main

import "testing"

// TestParseConfigSandboxMemory: DSHD_SANDBOX_MEMORY_BYTES is the memory bound of each sandboxed
// command (default 1 GiB); 0 turns the memory cgroup off (negative in the Config); a bound below
// 16 MiB or one that is not a number is refused.
func TestParseConfigSandboxMemory(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]int64{"": 1 << 30, "268435456": 256 << 20, "0": -1} {
		c, err := ParseConfig(func(k string) string { return map[string]string{"DSHD_SANDBOX_MEMORY_BYTES": v}[k] })
		if err != nil || c.SandboxMemoryBytes != want {
			t.Errorf("DSHD_SANDBOX_MEMORY_BYTES=%q: %d, %v; want %d", v, c.SandboxMemoryBytes, err, want)
		}
	}
	for _, v := range []string{"-1", "1000", "1G"} {
		if _, err := ParseConfig(func(k string) string { return map[string]string{"DSHD_SANDBOX_MEMORY_BYTES": v}[k] }); err == nil {
			t.Errorf("DSHD_SANDBOX_MEMORY_BYTES=%s accepted", v)
		}
	}
}
