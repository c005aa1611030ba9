package sandbox

import (
	"bufio"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroupParent is the server's own memory cgroup, under which each sandboxed command gets a
// child cgroup of its own (cgroup v1's memory hierarchy, or a cgroup v2 directory whose
// subtree has the memory controller), made before the command starts and removed after it.
type cgroupParent struct {
	dir string // the server's cgroup directory
	v2  bool
}

func (p *cgroupParent) String() string {
	if p.v2 {
		return "v2 " + p.dir
	}
	return "v1 " + p.dir
}

// findCgroupParent finds the server's memory cgroup and checks that a child can be made in it
// with a memory limit, or says why not.
func findCgroupParent() (*cgroupParent, error) {
	v1, v2, err := cgroupMounts()
	if err != nil {
		return nil, err
	}
	own, err := ownCgroups()
	if err != nil {
		return nil, err
	}
	var p *cgroupParent
	switch {
	case v1 != "" && own["memory"] != "":
		p = &cgroupParent{dir: filepath.Join(v1, own["memory"])}
	case v2 != "" && own[""] != "":
		dir := filepath.Join(v2, own[""])
		// A v2 cgroup with processes cannot hand controllers to children (except the root):
		// the operator delegates one whose subtree already has memory on.
		ctl, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
		if err != nil || !strings.Contains(" "+strings.TrimSpace(string(ctl))+" ", " memory ") {
			return nil, fmt.Errorf("the server's cgroup v2 %s does not enable the memory controller for its children", dir)
		}
		p = &cgroupParent{dir: dir, v2: true}
	default:
		return nil, errors.New("no memory cgroup controller is mounted")
	}
	p.sweep()
	probe, err := p.create(64 << 20)
	if err != nil {
		return nil, err
	}
	probe.remove()
	return p, nil
}

// cgroupPrefix starts the name of every command's cgroup.
const cgroupPrefix = "dshd-sandbox-"

// cgroupOrphanAge is how old an empty cgroup of ours must be before sweep removes it: a command's
// cgroup is empty only between its creation and the move of the command into it, and after the
// command ended until its server removes it, each far shorter.
const cgroupOrphanAge = 5 * time.Minute

// sweep removes the cgroups a server that is no longer running left behind (it was killed while
// commands ran): those older than cgroupOrphanAge that hold no process (rmdir refuses others).
// The pid in a cgroup's name is not trusted (review finding 8): in a container the server is pid 1
// after every restart, so its predecessor's cgroups carry its own pid, and a live server in
// another PID namespace sharing the parent has a pid that looks dead from here.
func (p *cgroupParent) sweep() {
	entries, _ := os.ReadDir(p.dir)
	now := time.Now()
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), cgroupPrefix) {
			continue
		}
		if fi, err := e.Info(); err == nil && now.Sub(fi.ModTime()) > cgroupOrphanAge {
			_ = syscall.Rmdir(filepath.Join(p.dir, e.Name()))
		}
	}
}

// cgroupMounts returns the mount points of the v1 memory hierarchy and of cgroup v2, "" for
// what is not mounted.
func cgroupMounts() (v1, v2 string, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", "", fmt.Errorf("mountinfo: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(tail) < 3 || fields[3] != "/" {
			continue
		}
		switch {
		case tail[0] == "cgroup" && v1 == "" && hasOption(tail[2], "memory"):
			v1 = fields[4]
		case tail[0] == "cgroup2" && v2 == "":
			v2 = fields[4]
		}
	}
	return v1, v2, sc.Err()
}

func hasOption(opts, name string) bool {
	for o := range strings.SplitSeq(opts, ",") {
		if o == name {
			return true
		}
	}
	return false
}

// ownCgroups returns the server's cgroup path per v1 controller, and its v2 path under "".
func ownCgroups() (map[string]string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	own := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for c := range strings.SplitSeq(parts[1], ",") {
			own[c] = parts[2]
		}
	}
	return own, nil
}

// cgroup is one command's memory cgroup.
type cgroup struct {
	dir string
	v2  bool
}

// create makes a child cgroup that allows limit bytes of memory (swap included).
func (p *cgroupParent) create(limit int64) (*cgroup, error) {
	// The server's pid (sweep removes what a server that died left) and a random part: several
	// providers (and servers) may share the parent.
	name := fmt.Sprintf("%s%d-%s", cgroupPrefix, os.Getpid(), rand.Text())
	c := &cgroup{dir: filepath.Join(p.dir, name), v2: p.v2}
	if err := os.Mkdir(c.dir, 0o755); err != nil {
		return nil, fmt.Errorf("sandbox: memory cgroup: %w", err)
	}
	n := strconv.FormatInt(limit, 10)
	var err error
	if p.v2 {
		err = c.write("memory.max", n)
		if err == nil {
			err = c.writeIfPresent("memory.swap.max", "0")
		}
	} else {
		err = c.write("memory.limit_in_bytes", n)
		if err == nil {
			err = c.writeIfPresent("memory.memsw.limit_in_bytes", n)
		}
	}
	if err != nil {
		c.remove()
		return nil, fmt.Errorf("sandbox: memory cgroup: %w", err)
	}
	return c, nil
}

func (c *cgroup) write(file, value string) error {
	return os.WriteFile(filepath.Join(c.dir, file), []byte(value), 0)
}

func (c *cgroup) writeIfPresent(file, value string) error {
	if _, err := os.Stat(filepath.Join(c.dir, file)); err != nil {
		return nil
	}
	return c.write(file, value)
}

// add moves the process pid (all its threads) into the cgroup.
func (c *cgroup) add(pid int) error {
	if err := c.write("cgroup.procs", strconv.Itoa(pid)); err != nil {
		return fmt.Errorf("sandbox: memory cgroup: %w", err)
	}
	return nil
}

// oomKilled reports whether the kernel's OOM killer killed a process of the cgroup.
func (c *cgroup) oomKilled() bool {
	file := "memory.oom_control"
	if c.v2 {
		file = "memory.events"
	}
	b, err := os.ReadFile(filepath.Join(c.dir, file))
	if err != nil {
		return false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			return strings.TrimSpace(v) != "0"
		}
	}
	return false
}

// peak returns the most memory the cgroup held at once (its processes' and their tmpfs pages),
// 0 when the kernel does not say.
func (c *cgroup) peak() int64 {
	file := "memory.max_usage_in_bytes"
	if c.v2 {
		file = "memory.peak"
	}
	b, err := os.ReadFile(filepath.Join(c.dir, file))
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// remove removes the cgroup. The command's processes are dead, but the last of them may still
// be on its way out of the cgroup after the kill: the removal is retried for up to 2 s.
func (c *cgroup) remove() {
	for i := 0; ; i++ {
		err := syscall.Rmdir(c.dir)
		if err == nil || errors.Is(err, syscall.ENOENT) || !errors.Is(err, syscall.EBUSY) || i == 100 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
