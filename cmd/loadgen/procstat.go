package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// clockTicks is the kernel's USER_HZ, the unit of the CPU times in /proc/<pid>/stat. It is 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// ProcStat holds the fields of /proc/<pid>/stat that loadgen uses; times are in clock ticks.
type ProcStat struct {
	PID, PPID                    int
	Comm                         string
	UTime, STime, CUTime, CSTime int64
}

// ParseProcStat parses the contents of /proc/<pid>/stat. The command name is in parentheses and
// may itself hold spaces and parentheses, so fields are counted from the last ')'.
func ParseProcStat(b []byte) (ProcStat, error) {
	open, close := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || close < open {
		return ProcStat{}, fmt.Errorf("procstat: no command name in %q", b)
	}
	var st ProcStat
	var err error
	if st.PID, err = strconv.Atoi(strings.TrimSpace(string(b[:open]))); err != nil {
		return ProcStat{}, fmt.Errorf("procstat: pid: %w", err)
	}
	st.Comm = string(b[open+1 : close])
	// After ')': state(3) ppid(4) ... utime(14) stime(15) cutime(16) cstime(17).
	f := strings.Fields(string(b[close+1:]))
	if len(f) < 15 {
		return ProcStat{}, fmt.Errorf("procstat: %d fields after the command name, want at least 15", len(f))
	}
	nums := make([]int64, 5)
	for i, idx := range []int{1, 11, 12, 13, 14} { // ppid, utime, stime, cutime, cstime
		if nums[i], err = strconv.ParseInt(f[idx], 10, 64); err != nil {
			return ProcStat{}, fmt.Errorf("procstat: field %d: %w", idx+3, err)
		}
	}
	st.PPID = int(nums[0])
	st.UTime, st.STime, st.CUTime, st.CSTime = nums[1], nums[2], nums[3], nums[4]
	return st, nil
}

// ReadProcStat reads /proc/<pid>/stat.
func ReadProcStat(pid int) (ProcStat, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return ProcStat{}, err
	}
	return ParseProcStat(b)
}

// ticks converts clock ticks to a duration.
func ticks(n int64) time.Duration { return time.Duration(n) * time.Second / clockTicks }

// ProcessCPU returns the user+system CPU time the process has used so far (not its children).
func ProcessCPU(pid int) (time.Duration, error) {
	st, err := ReadProcStat(pid)
	if err != nil {
		return 0, err
	}
	return ticks(st.UTime + st.STime), nil
}

// TreeCPU returns the CPU time of a process and its direct children: the process's own time, the
// time of children it has already reaped (cutime, cstime) and that of the children alive now. For
// a PostgreSQL postmaster this covers every backend and auxiliary process, including backends
// that exited in between (the postmaster reaps them).
func TreeCPU(pid int) (time.Duration, error) {
	root, err := ReadProcStat(pid)
	if err != nil {
		return 0, err
	}
	total := root.UTime + root.STime + root.CUTime + root.CSTime
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil || child == pid {
			continue
		}
		st, err := ReadProcStat(child)
		if err != nil || st.PPID != pid {
			continue // gone, or not a child
		}
		total += st.UTime + st.STime
	}
	return ticks(total), nil
}

// PostmasterPID reads the postmaster's pid from the first line of <dataDir>/postmaster.pid.
func PostmasterPID(dataDir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(line))
}

// MachineCPU reads the first line of /proc/stat and returns the busy and total CPU time of the
// whole machine (all cores) in clock ticks; idle and iowait count as not busy.
func MachineCPU() (busy, total int64, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	return ParseMachineCPU(b)
}

// ParseMachineCPU parses the aggregate "cpu" line of /proc/stat.
func ParseMachineCPU(b []byte) (busy, total int64, err error) {
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("procstat: unexpected /proc/stat line %q", line)
	}
	var idle int64
	for i, s := range f[1:] {
		if i >= 8 { // guest and guest_nice are already counted in user and nice
			break
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("procstat: /proc/stat: %w", err)
		}
		total += n
		if i == 3 || i == 4 { // idle, iowait
			idle += n
		}
	}
	return total - idle, total, nil
}

func numCPU() int { return runtime.NumCPU() }
