package main

import (
	"runtime"
	"testing"
)

// TestParseCPUSettings: the defaults of the program and command slots follow the cores, the
// settings override them, and a bad value or a tenant share above the total is refused.
func TestParseCPUSettings(t *testing.T) {
	t.Parallel()
	c, err := ParseConfig(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	cores := runtime.GOMAXPROCS(0)
	if got, want := c.CPU, (CPUSettings{max(cores/2, 1), max(2*cores, 4), max(2*cores, 4) / 2}); got != want {
		t.Fatalf("defaults %+v, want %+v", got, want)
	}
	env := map[string]string{"DSHD_CODE_MAX_CONCURRENT": "3", "DSHD_BASH_MAX_CONCURRENT": "10", "DSHD_BASH_MAX_PER_TENANT": "4"}
	if c, err = ParseConfig(func(k string) string { return env[k] }); err != nil || c.CPU != (CPUSettings{3, 10, 4}) {
		t.Fatalf("parsed %+v, %v", c.CPU, err)
	}
	for _, bad := range []map[string]string{
		{"DSHD_CODE_MAX_CONCURRENT": "0"}, {"DSHD_BASH_MAX_CONCURRENT": "-1"}, {"DSHD_BASH_MAX_PER_TENANT": "x"},
		{"DSHD_BASH_MAX_CONCURRENT": "2", "DSHD_BASH_MAX_PER_TENANT": "3"},
	} {
		if _, err := ParseConfig(func(k string) string { return bad[k] }); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
