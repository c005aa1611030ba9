package sandbox

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// WorkspacesConfig configures the workspaces.
type WorkspacesConfig struct {
	// Root is the directory holding every workspace (DSHD_WORKSPACE_ROOT): <Root>/<session id>,
	// created on first use. Several replicas must share it (a network filesystem): any replica
	// may run a session's next turn. Required.
	Root string
	// QuotaBytes bounds the bytes of one workspace's files; a file tool write that would exceed
	// it fails with FS_TOO_LARGE. Default DefaultQuotaBytes; negative: no quota.
	QuotaBytes int64
	// TenantQuotaBytes bounds the bytes of the files of all the workspaces of one tenant
	// (DSHD_TENANT_WORKSPACE_BYTES): a file tool write that would exceed it fails with
	// FS_QUOTA_EXCEEDED, and `bash` reports a command that left the tenant over it. A workspace
	// counts for the tenant Bind recorded for it. 0 or negative: no bound.
	TenantQuotaBytes int64
	// TenantUsageTTL is how long a tenant's measured usage is reused (with this process's own
	// writes added to it) before it is measured again. Default DefaultTenantUsageTTL.
	TenantUsageTTL time.Duration
	// Owner, when set, owns the directories and files the tools create (a root server whose
	// sandboxes run as another user: Bwrap.Owner). Nil: they belong to the server's user.
	Owner *Owner
}

// Owner is a host user and group.
type Owner struct{ UID, GID int }

// DefaultQuotaBytes is the default workspace quota: 1 GiB.
const DefaultQuotaBytes = 1 << 30

// Errors of workspace operations. Code maps them, and the os errors, to the FS_* codes.
var (
	// ErrOutside is a path that leaves the workspace: an absolute path elsewhere, a `..` above
	// it, or a symbolic link out of it.
	ErrOutside = errors.New("path is outside the workspace")
	// ErrQuota is a write that would take the workspace over its quota.
	ErrQuota = errors.New("workspace quota exceeded")
	// ErrBadID is a workspace id that is not a plain name.
	ErrBadID = errors.New("sandbox: invalid workspace id")
)

// Workspaces are the per-session workspaces under one root: <Root>/<id>/files is the workspace
// (bound at WorkspacePath in a sandbox), <Root>/<id>/observed.json the read-before-edit
// observations of the file tools (kept outside the files, where no command can change them).
// They survive restarts (they are plain directories), forks copy them (Copy) and deleting a
// session deletes its workspace (Delete). Safe for concurrent use.
type Workspaces struct {
	cfg WorkspacesConfig
	// locks serialise the observation updates of a workspace (striped by id).
	locks [64]sync.Mutex
	// usageMu guards usage, the cached usage of the tenants, and pending, the bytes of the forks'
	// copies admitted and not yet done, by tenant (tenant.go).
	usageMu sync.Mutex
	usage   map[string]*tenantUsage
	pending map[string]int64
	// flights are the shared measurements of the tenants (sharedUsage), under usageMu.
	flights map[string]*flight
	// onMeasure and onJoin, set only by tests (export_test.go), are called when sharedUsage
	// starts a measurement, and when it joins one under way.
	onMeasure, onJoin func()
}

var validID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`)

// NewWorkspaces creates the root when it does not exist.
func NewWorkspaces(cfg WorkspacesConfig) (*Workspaces, error) {
	if cfg.Root == "" {
		return nil, errors.New("sandbox: the workspace root is required")
	}
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("sandbox: workspace root: %w", err)
	}
	cfg.Root = root
	if cfg.QuotaBytes == 0 {
		cfg.QuotaBytes = DefaultQuotaBytes
	}
	if cfg.TenantUsageTTL <= 0 {
		cfg.TenantUsageTTL = DefaultTenantUsageTTL
	}
	// 0711: a sandbox user reaches its own workspace but cannot list the others.
	if err := os.MkdirAll(root, 0o711); err != nil {
		return nil, fmt.Errorf("sandbox: workspace root: %w", err)
	}
	sweepCopies(root, time.Now())
	return &Workspaces{cfg: cfg, usage: map[string]*tenantUsage{}, pending: map[string]int64{}, flights: map[string]*flight{}}, nil
}

// Root returns the absolute workspace root.
func (w *Workspaces) Root() string { return w.cfg.Root }

func (w *Workspaces) dir(id string) (string, error) {
	if !validID.MatchString(id) {
		return "", fmt.Errorf("%w %q", ErrBadID, id)
	}
	return filepath.Join(w.cfg.Root, id), nil
}

// Open returns the workspace of id, creating it on first use. Close it after use.
func (w *Workspaces) Open(id string) (*Workspace, error) {
	d, err := w.dir(id)
	if err != nil {
		return nil, err
	}
	files := filepath.Join(d, "files")
	if err := os.MkdirAll(d, 0o711); err != nil {
		return nil, fmt.Errorf("sandbox: workspace: %w", err)
	}
	if err := os.Mkdir(files, 0o755); err == nil {
		if o := w.cfg.Owner; o != nil {
			if err := os.Lchown(files, o.UID, o.GID); err != nil {
				return nil, fmt.Errorf("sandbox: workspace: %w", err)
			}
		}
	} else if !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("sandbox: workspace: %w", err)
	}
	r, err := os.OpenRoot(files)
	if err != nil {
		return nil, fmt.Errorf("sandbox: workspace: %w", err)
	}
	tenant, err := w.tenantOf(id)
	if err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("sandbox: workspace: %w", err)
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return &Workspace{ID: id, Dir: files, Root: r, state: filepath.Join(d, "observed.json"),
		ws: w, lock: &w.locks[h.Sum32()%uint32(len(w.locks))], tenant: tenant}, nil
}

// Delete removes the workspace of id (nothing when it does not exist). The session delete path
// calls it.
func (w *Workspaces) Delete(id string) error {
	d, err := w.dir(id)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(d); err != nil {
		return fmt.Errorf("sandbox: delete workspace: %w", err)
	}
	w.unbind(id)
	return nil
}

// Workspace is one open workspace. Its methods are safe for concurrent use; Close it once.
type Workspace struct {
	ID string
	// Dir is the host directory of the files: what a sandbox binds at WorkspacePath.
	Dir string
	// Root opens paths relative to Dir and refuses any that leaves it, symbolic links included
	// (os.Root). The file tools do all their I/O through it.
	Root *os.Root

	ws     *Workspaces
	state  string
	lock   *sync.Mutex
	tenant string // the tenant Bind recorded, "" for none
}

// Close releases the workspace's root.
func (ws *Workspace) Close() error { return ws.Root.Close() }

// Rel turns a path given by a model into a clean slash-separated path relative to the workspace,
// "." for the workspace itself. An absolute path is accepted under WorkspacePath (as the sandbox
// shows it) or under Dir (as the local shell does); any other, and one whose `..` climbs above
// the workspace, is ErrOutside. Symbolic links are checked when Root follows them.
func (ws *Workspace) Rel(p string) (string, error) {
	if strings.ContainsRune(p, 0) {
		return "", ErrOutside
	}
	if path.IsAbs(p) {
		rest, ok := under(path.Clean(p), WorkspacePath)
		if !ok {
			rest, ok = under(path.Clean(p), filepath.ToSlash(ws.Dir))
		}
		if !ok {
			return "", ErrOutside
		}
		p = rest
	}
	p = path.Clean(p)
	if p == ".." || strings.HasPrefix(p, "../") {
		return "", ErrOutside
	}
	return p, nil
}

func under(p, dir string) (string, bool) {
	if p == dir {
		return ".", true
	}
	rest, ok := strings.CutPrefix(p, dir+"/")
	return rest, ok
}

// Own hands rel to the workspace owner, when there is one (WorkspacesConfig.Owner).
func (ws *Workspace) Own(rel string) error {
	if o := ws.ws.cfg.Owner; o != nil {
		return ws.Root.Lchown(rel, o.UID, o.GID)
	}
	return nil
}

// MkdirAll creates the directory rel and its missing parents, owned by the workspace owner.
func (ws *Workspace) MkdirAll(rel string) error {
	if rel == "." {
		return nil
	}
	cur := ""
	for _, part := range strings.Split(rel, "/") {
		cur = path.Join(cur, part)
		err := ws.Root.Mkdir(cur, 0o755)
		switch {
		case err == nil:
			if err := ws.Own(cur); err != nil {
				return err
			}
		case errors.Is(err, fs.ErrExist):
			fi, err := ws.Root.Stat(cur)
			if err != nil {
				return err
			}
			if !fi.IsDir() {
				return &fs.PathError{Op: "mkdir", Path: cur, Err: syscall.ENOTDIR}
			}
		default:
			return err
		}
	}
	return nil
}

// Usage returns the bytes of the workspace's regular files, walked without following anything
// its tenant controls (walk.go).
func (ws *Workspace) Usage() (int64, error) {
	n, err := treeBytes(ws.Dir)
	if err != nil {
		return 0, fmt.Errorf("sandbox: workspace usage: %w", err)
	}
	return n, nil
}

// CheckQuota returns ErrQuota when growing the workspace by grow bytes (negative: it shrinks)
// would take it over its quota, and ErrTenantQuota when it would take its tenant's workspaces
// over the tenant bound. A write it admits counts for the tenant at once; call WriteFailed when
// that write then does not happen.
func (ws *Workspace) CheckQuota(grow int64) error {
	if grow <= 0 {
		_ = ws.ws.reserveTenant(ws.tenant, grow) // a shrink: admitted, and counted
		return nil
	}
	if q := ws.ws.cfg.QuotaBytes; q >= 0 {
		used, err := ws.Usage()
		if err != nil {
			return err
		}
		if used+grow > q {
			return fmt.Errorf("%w: %d bytes used, this write adds %d, the quota is %d", ErrQuota, used, grow, q)
		}
	}
	return ws.ws.reserveTenant(ws.tenant, grow)
}
