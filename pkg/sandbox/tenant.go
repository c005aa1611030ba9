package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// The tenant bound. A workspace belongs to the tenant Bind recorded for it, in two small files
// outside every workspace (where no command can change them, and without creating the
// workspace): <root>/.sessions/<id> holds the tenant's id, and <root>/.tenants/<tenant>/<id> is
// an empty marker, so that a tenant's workspaces are found without reading every workspace of the
// root. A tenant's usage is the bytes of the regular files of its workspaces, measured by walking
// them; each Workspaces keeps the last measurement of a tenant for
// WorkspacesConfig.TenantUsageTTL and adds its own writes to it, and a `bash` command (which may
// write anything) measures it again (Workspace.TenantUsage).

// ErrTenantQuota is a write that would take the workspaces of the workspace's tenant over the
// tenant bound (WorkspacesConfig.TenantQuotaBytes); Code maps it to FS_QUOTA_EXCEEDED.
var ErrTenantQuota = errors.New("the tenant's workspace quota is exceeded")

// DefaultTenantUsageTTL is the default of WorkspacesConfig.TenantUsageTTL.
const DefaultTenantUsageTTL = 10 * time.Second

const (
	sessionsDir = ".sessions"
	tenantsDir  = ".tenants"
)

// tenantUsage is the cached usage of one tenant: bytes as measured at, plus the writes this
// Workspaces made since.
type tenantUsage struct {
	bytes int64
	at    time.Time
}

// Bind records that the workspace of id belongs to tenant (a session's tenant: the agents bind
// each session before its turn runs). It does not create the workspace, is idempotent and cheap
// once done; binding a workspace to another tenant moves it.
func (w *Workspaces) Bind(id, tenant string) error {
	if !validID.MatchString(id) {
		return fmt.Errorf("%w %q", ErrBadID, id)
	}
	if !validID.MatchString(tenant) {
		return fmt.Errorf("%w: tenant %q", ErrBadID, tenant)
	}
	marker := filepath.Join(w.cfg.Root, tenantsDir, tenant, id)
	if _, err := os.Stat(marker); err == nil {
		return nil
	}
	old, _ := w.tenantOf(id)
	if old != tenant {
		dir := filepath.Join(w.cfg.Root, sessionsDir)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("sandbox: bind workspace: %w", err)
		}
		if err := writeAtomic(filepath.Join(dir, id), []byte(tenant+"\n")); err != nil {
			return fmt.Errorf("sandbox: bind workspace: %w", err)
		}
		if old != "" {
			_ = os.Remove(filepath.Join(w.cfg.Root, tenantsDir, old, id))
			w.forget(old)
		}
	}
	if err := w.mark(tenant, id); err != nil {
		return fmt.Errorf("sandbox: bind workspace: %w", err)
	}
	w.forget(tenant)
	return nil
}

// mark creates the marker of workspace id in tenant's directory.
func (w *Workspaces) mark(tenant, id string) error {
	dir := filepath.Join(w.cfg.Root, tenantsDir, tenant)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, id), os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	return f.Close()
}

// unbind removes the record of workspace id's tenant, when it has one.
func (w *Workspaces) unbind(id string) {
	tenant, _ := w.tenantOf(id)
	if tenant == "" {
		return
	}
	_ = os.Remove(filepath.Join(w.cfg.Root, tenantsDir, tenant, id))
	_ = os.Remove(filepath.Join(w.cfg.Root, sessionsDir, id))
	w.forget(tenant)
}

// tenantOf returns the tenant recorded for workspace id, "" when none is.
func (w *Workspaces) tenantOf(id string) (string, error) {
	b, err := os.ReadFile(filepath.Join(w.cfg.Root, sessionsDir, id))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		return "", err
	}
	t := strings.TrimSpace(string(b))
	if !validID.MatchString(t) {
		return "", nil
	}
	return t, nil
}

// writeAtomic replaces name with data by a rename.
func writeAtomic(name string, data []byte) error {
	tmp := fmt.Sprintf("%s.%d.tmp", name, os.Getpid())
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, name); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// forget drops the cached usage of tenant: the next check measures it again.
func (w *Workspaces) forget(tenant string) {
	w.usageMu.Lock()
	delete(w.usage, tenant)
	w.usageMu.Unlock()
}

// TenantUsage returns the bytes of the regular files of tenant's workspaces, measured afresh.
func (w *Workspaces) TenantUsage(tenant string) (int64, error) {
	w.forget(tenant)
	return w.tenantUsed(tenant)
}

// tenantUsed returns tenant's usage: the cached one while it is fresh, else a new measurement
// (which is then cached).
func (w *Workspaces) tenantUsed(tenant string) (int64, error) {
	now := time.Now()
	w.usageMu.Lock()
	if u, ok := w.usage[tenant]; ok && now.Sub(u.at) < w.cfg.TenantUsageTTL {
		w.usageMu.Unlock()
		return u.bytes, nil
	}
	w.usageMu.Unlock()
	n, err := w.measure(tenant)
	if err != nil {
		return 0, err
	}
	w.usageMu.Lock()
	if _, ok := w.usage[tenant]; !ok { // a concurrent measurement or write may have stored a later one
		w.usage[tenant] = &tenantUsage{bytes: n, at: now}
	}
	w.usageMu.Unlock()
	return n, nil
}

// measure walks the workspaces of tenant: the ones its markers name.
func (w *Workspaces) measure(tenant string) (int64, error) {
	entries, err := os.ReadDir(filepath.Join(w.cfg.Root, tenantsDir, tenant))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("sandbox: tenant usage: %w", err)
	}
	var n int64
	for _, e := range entries {
		if !validID.MatchString(e.Name()) {
			continue
		}
		m, err := treeBytes(filepath.Join(w.cfg.Root, e.Name(), "files"))
		if errors.Is(err, errTooDeep) {
			// What lies deeper is not measured: it counts as more than the bound, so that the
			// tenant is over it (its commands may still run, to remove the tree).
			m, err = m+w.cfg.TenantQuotaBytes+1, nil
		}
		if err != nil {
			return 0, fmt.Errorf("sandbox: tenant usage: %w", err)
		}
		n += m
	}
	return n, nil
}

// reserveTenant admits a write that grows tenant's workspaces by grow bytes, or returns
// ErrTenantQuota: the admitted bytes are added to the cached usage, so that concurrent writes of
// this Workspaces count each other. No bound or no tenant admits at once; a shrink (grow <= 0)
// is always admitted and taken off the cached usage.
func (w *Workspaces) reserveTenant(tenant string, grow int64) error {
	q := w.cfg.TenantQuotaBytes
	if q <= 0 || tenant == "" {
		return nil
	}
	if grow <= 0 {
		w.usageMu.Lock()
		if u := w.usage[tenant]; u != nil {
			u.bytes = max(u.bytes+grow, 0)
		}
		w.usageMu.Unlock()
		return nil
	}
	used, err := w.tenantUsed(tenant)
	if err != nil {
		return err
	}
	w.usageMu.Lock()
	defer w.usageMu.Unlock()
	u := w.usage[tenant]
	if u != nil {
		used = u.bytes
	}
	used += w.pending[tenant]
	if used+grow > q {
		return fmt.Errorf("%w: the tenant's workspaces hold %d bytes, this write adds %d, the bound is %d; remove files to make room",
			ErrTenantQuota, used, grow, q)
	}
	if u != nil {
		u.bytes += grow
	}
	return nil
}

// AdmitCopy admits a fork's copy of the workspace of src (Copy) against the bound of src's
// tenant, before anything is written: the bytes of src's files, measured now, plus the tenant's
// usage over WorkspacesConfig.TenantQuotaBytes is ErrTenantQuota. An admitted copy counts for the
// tenant at once, so that concurrent forks (and writes) of this Workspaces count each other;
// done, which the caller calls once after Copy (whatever its outcome), ends that: a finished copy
// is then measured with the tenant's workspaces. No bound, or a source without a tenant, admits
// at once.
func (w *Workspaces) AdmitCopy(src string) (done func(), err error) {
	d, err := w.dir(src)
	if err != nil {
		return nil, err
	}
	tenant, err := w.tenantOf(src)
	if err != nil {
		return nil, fmt.Errorf("sandbox: admit copy: %w", err)
	}
	q := w.cfg.TenantQuotaBytes
	if q <= 0 || tenant == "" {
		return func() {}, nil
	}
	n, err := treeBytes(filepath.Join(d, "files"))
	if err != nil {
		return nil, fmt.Errorf("sandbox: admit copy: %w", err)
	}
	used, err := w.tenantUsed(tenant)
	if err != nil {
		return nil, err
	}
	w.usageMu.Lock()
	defer w.usageMu.Unlock()
	if u := w.usage[tenant]; u != nil {
		used = u.bytes
	}
	used += w.pending[tenant]
	if used+n > q {
		return nil, fmt.Errorf("%w: the tenant's workspaces hold %d bytes, the fork copies %d, the bound is %d; remove files to make room",
			ErrTenantQuota, used, n, q)
	}
	w.pending[tenant] += n
	var once sync.Once
	return func() {
		once.Do(func() {
			w.usageMu.Lock()
			if w.pending[tenant] -= n; w.pending[tenant] <= 0 {
				delete(w.pending, tenant)
			}
			delete(w.usage, tenant) // measured again, with the copy when it was made
			w.usageMu.Unlock()
		})
	}, nil
}

// Tenant returns the tenant the workspace is bound to, "" when it is bound to none.
func (ws *Workspace) Tenant() string { return ws.tenant }

// TenantQuota returns the tenant bound (WorkspacesConfig.TenantQuotaBytes; 0: none).
func (ws *Workspace) TenantQuota() int64 { return ws.ws.cfg.TenantQuotaBytes }

// TenantUsage measures the usage of the workspace's tenant (after or while a command that may
// write anything runs) and says whether it is over the tenant bound; ok is false without a bound
// or a tenant. The measurement is shared (sharedUsage): the commands of one tenant that watch it
// at once cost one walk, not one each. A measure that fails is over the bound (fail closed): used
// is then the bound plus one, with the error.
func (ws *Workspace) TenantUsage() (used int64, over, ok bool, err error) {
	return ws.tenantUsage(func(t string) (int64, error) { return ws.ws.sharedUsage(t, false) })
}

// TenantUsageAfresh is TenantUsage measured anew (before and after a command: a shared
// measurement may predate the writes or removals just made); the watchdogs then share it.
func (ws *Workspace) TenantUsageAfresh() (used int64, over, ok bool, err error) {
	return ws.tenantUsage(func(t string) (int64, error) { return ws.ws.sharedUsage(t, true) })
}

func (ws *Workspace) tenantUsage(measure func(tenant string) (int64, error)) (used int64, over, ok bool, err error) {
	q := ws.ws.cfg.TenantQuotaBytes
	if q <= 0 || ws.tenant == "" {
		return 0, false, false, nil
	}
	used, err = measure(ws.tenant)
	if err != nil {
		return q + 1, true, true, err
	}
	return used, used > q, true, nil
}

// The pace of the shared measurements: a measurement is reused while it is younger than ten
// times what it took (so that measuring a tenant costs a replica about a tenth of a core however
// many of its commands watch it), but never when older than maxShareAge.
const (
	minShareAge = 5 * time.Millisecond
	maxShareAge = 250 * time.Millisecond
)

// flight is one shared measurement of a tenant's usage: done is closed once bytes and err are
// set, at end.
type flight struct {
	done       chan struct{}
	bytes      int64
	err        error
	start, end time.Time
}

// sharedUsage returns a measurement of tenant's usage shared by its concurrent callers: the one
// under way, or the last one while it is young (see minShareAge), or else a new one; fresh always
// makes a new one, which the next callers share.
func (w *Workspaces) sharedUsage(tenant string, fresh bool) (int64, error) {
	w.usageMu.Lock()
	f := w.flights[tenant]
	if fresh {
		f = nil
	}
	if f != nil {
		select {
		case <-f.done:
			if time.Since(f.end) >= min(max(10*f.end.Sub(f.start), minShareAge), maxShareAge) {
				f = nil
			}
		default:
		}
	}
	if f != nil {
		w.usageMu.Unlock()
		if w.onJoin != nil {
			w.onJoin()
		}
		<-f.done
		return f.bytes, f.err
	}
	f = &flight{done: make(chan struct{}), start: time.Now()}
	w.flights[tenant] = f
	w.usageMu.Unlock()
	if w.onMeasure != nil {
		w.onMeasure()
	}
	f.bytes, f.err = w.TenantUsage(tenant)
	f.end = time.Now()
	close(f.done)
	return f.bytes, f.err
}

// WriteFailed drops the cached usage of the workspace's tenant after a write that CheckQuota
// admitted did not complete: the bytes it reserved are not there.
func (ws *Workspace) WriteFailed() {
	if ws.tenant != "" {
		ws.ws.forget(ws.tenant)
	}
}
