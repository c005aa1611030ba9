package pgstore

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/preset"
	"github.com/dshd/dshd/pkg/tenant"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Presets reads and writes presets. It is safe for concurrent use.
type Presets struct {
	pool  *pgxpool.Pool
	rules preset.Rules

	versions versionCache // pinned versions read before: they never change
}

// NewPresets returns the preset store over pool; it validates every write with rules.
func NewPresets(pool *pgxpool.Pool, rules preset.Rules) *Presets {
	return &Presets{pool: pool, rules: rules}
}

// PresetCreate validates b (filling defaults) and stores it as version 1 of a new preset.
func (s *Presets) PresetCreate(ctx context.Context, tenantID uuid.UUID, b preset.Body) (preset.Preset, error) {
	if err := s.rules.Validate(&b); err != nil {
		return preset.Preset{}, err
	}
	if err := s.checkCredential(ctx, tenantID, b.Model); err != nil {
		return preset.Preset{}, err
	}
	p := preset.Preset{ID: uuid.New(), Version: 1, Body: b}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `INSERT INTO presets (id, tenant_id, name, version) VALUES ($1, $2, $3, 1)
			RETURNING created_at, updated_at`, p.ID, tenantID, b.Name).Scan(&p.CreatedAt, &p.UpdatedAt)
		if err != nil {
			return err
		}
		return versionInsert(ctx, tx, tenantID, p)
	})
	if err != nil {
		return preset.Preset{}, dbError(err, "preset: create")
	}
	return p, nil
}

// PresetUpdate validates b and stores it as the next version of preset id.
func (s *Presets) PresetUpdate(ctx context.Context, tenantID, id uuid.UUID, b preset.Body) (preset.Preset, error) {
	if err := s.rules.Validate(&b); err != nil {
		return preset.Preset{}, err
	}
	if err := s.checkCredential(ctx, tenantID, b.Model); err != nil {
		return preset.Preset{}, err
	}
	p := preset.Preset{ID: id, Body: b}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// The row lock taken by UPDATE serializes concurrent updates of one preset.
		err := tx.QueryRow(ctx, `UPDATE presets SET version = version + 1, name = $3, updated_at = now()
			WHERE id = $1 AND tenant_id = $2 AND deleted_at IS NULL
			RETURNING version, created_at, updated_at`, id, tenantID, b.Name).
			Scan(&p.Version, &p.CreatedAt, &p.UpdatedAt)
		if err != nil {
			return err
		}
		return versionInsert(ctx, tx, tenantID, p)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return preset.Preset{}, preset.ErrNotFound
	}
	if err != nil {
		return preset.Preset{}, dbError(err, "preset: update")
	}
	return p, nil
}

// checkCredential checks that the credential a preset's model names exists in the tenant and is
// for the model's provider: an unknown one is tenant.CodeUnknownCredential, another provider's
// is invalid.
func (s *Presets) checkCredential(ctx context.Context, tenantID uuid.UUID, m preset.Model) error {
	if m.Credential == "" {
		return nil
	}
	c, err := credentialFind(ctx, s.pool, tenantID, m.Credential)
	if errors.Is(err, tenant.ErrCredentialNotFound) {
		return fault.New(tenant.CodeUnknownCredential, "model.credential: the tenant has no credential of this name or id")
	}
	if err != nil {
		return err
	}
	if c.Provider != m.Provider {
		return fault.New(fault.Invalid, "model.credential: credential %q is for provider %q, the model's provider is %q",
			c.Name, c.Provider, m.Provider)
	}
	return nil
}

func versionInsert(ctx context.Context, tx pgx.Tx, tenantID uuid.UUID, p preset.Preset) error {
	body, err := json.Marshal(p.Body)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO preset_versions (preset_id, version, tenant_id, body, created_at)
		VALUES ($1, $2, $3, $4, $5)`, p.ID, p.Version, tenantID, body, p.UpdatedAt)
	return err
}

const presetSelect = `SELECT p.id, v.version, p.created_at, v.created_at, v.body
	FROM presets p JOIN preset_versions v ON v.preset_id = p.id `

// PresetGet returns the current version of preset id, or preset.ErrNotFound.
func (s *Presets) PresetGet(ctx context.Context, tenantID, id uuid.UUID) (preset.Preset, error) {
	row := s.pool.QueryRow(ctx, presetSelect+`AND v.version = p.version
		WHERE p.id = $1 AND p.tenant_id = $2 AND p.deleted_at IS NULL`, id, tenantID)
	return scanOne(row)
}

// PresetVersionGet returns one version of preset id, also after the preset was deleted (a
// session keeps using the version it pinned), or preset.ErrNotFound.
//
// A version is written once and never changed (a preset's update adds a version, its deletion
// keeps them), so a version this process read before is not read again: every turn of a session
// needs its pinned version. The stored row is kept, not the decoded preset, so that no two
// callers share its maps and slices.
func (s *Presets) PresetVersionGet(ctx context.Context, tenantID, id uuid.UUID, version int) (preset.Preset, error) {
	key := versionKey{tenant: tenantID, id: id, version: version}
	if r, ok := s.versions.get(key); ok {
		return r.decode()
	}
	var r versionRow
	err := s.pool.QueryRow(ctx, presetSelect+`AND v.version = $3
		WHERE p.id = $1 AND p.tenant_id = $2`, id, tenantID, version).Scan(&r.id, &r.version, &r.created, &r.updated, &r.body)
	if errors.Is(err, pgx.ErrNoRows) {
		return preset.Preset{}, preset.ErrNotFound
	}
	if err != nil {
		return preset.Preset{}, dbError(err, "preset: get")
	}
	p, err := r.decode()
	if err == nil {
		s.versions.put(key, r)
	}
	return p, err
}

// versionKey names a preset version of a tenant.
type versionKey struct {
	tenant, id uuid.UUID
	version    int
}

// versionRow is a stored preset version, as read.
type versionRow struct {
	id               uuid.UUID
	version          int
	created, updated time.Time
	body             []byte
}

func (r versionRow) decode() (preset.Preset, error) {
	p := preset.Preset{ID: r.id, Version: r.version, CreatedAt: r.created, UpdatedAt: r.updated}
	if err := json.Unmarshal(r.body, &p.Body); err != nil {
		return preset.Preset{}, fmt.Errorf("preset %s version %d: stored body: %w", p.ID, p.Version, err)
	}
	p.Body.Normalize() // bodies written before a field existed get its default
	return p, nil
}

// Bounds of versionCache: past either, it starts again empty.
const (
	versionCacheEntries = 4096
	versionCacheBytes   = 32 << 20
)

// versionCache keeps the preset versions a process read, bounded by versionCacheEntries and
// versionCacheBytes of bodies. Safe for concurrent use; the zero value is empty.
type versionCache struct {
	mu    sync.Mutex
	m     map[versionKey]versionRow
	bytes int
}

func (c *versionCache) get(k versionKey) (versionRow, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.m[k]
	return r, ok
}

func (c *versionCache) put(k versionKey, r versionRow) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; ok {
		return
	}
	if c.m == nil || len(c.m) >= versionCacheEntries || c.bytes+len(r.body) > versionCacheBytes {
		c.m, c.bytes = map[versionKey]versionRow{}, 0
	}
	c.m[k] = r
	c.bytes += len(r.body)
}

// PresetDelete deletes preset id: it disappears from reads and lists, and no new session can
// use it; its versions stay for the sessions that pinned them.
func (s *Presets) PresetDelete(ctx context.Context, tenantID, id uuid.UUID) error {
	tag, err := s.pool.Exec(ctx, `UPDATE presets SET deleted_at = now()
		WHERE id = $1 AND tenant_id = $2 AND deleted_at IS NULL`, id, tenantID)
	if err != nil {
		return dbError(err, "preset: delete")
	}
	if tag.RowsAffected() == 0 {
		return preset.ErrNotFound
	}
	return nil
}

// PresetList returns up to limit presets (current versions) in creation order, after the
// position cursor ("" for the first page), and the cursor of the next page ("" after the last).
func (s *Presets) PresetList(ctx context.Context, tenantID uuid.UUID, cursor string, limit int) ([]preset.Preset, string, error) {
	after, afterID, err := cursorDecode(cursor)
	if err != nil {
		return nil, "", err
	}
	rows, err := s.pool.Query(ctx, presetSelect+`AND v.version = p.version
		WHERE p.tenant_id = $1 AND p.deleted_at IS NULL AND (p.created_at, p.id) > ($2, $3)
		ORDER BY p.created_at, p.id LIMIT $4`, tenantID, after, afterID, limit+1)
	if err != nil {
		return nil, "", dbError(err, "preset: list")
	}
	items, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (preset.Preset, error) { return scan(r) })
	if err != nil {
		return nil, "", dbError(err, "preset: list")
	}
	next := ""
	if len(items) > limit {
		items = items[:limit]
		last := items[limit-1]
		next = cursorEncode(last.CreatedAt, last.ID)
	}
	return items, next, nil
}

func scanOne(row pgx.Row) (preset.Preset, error) {
	p, err := scan(row)
	if errors.Is(err, pgx.ErrNoRows) {
		return preset.Preset{}, preset.ErrNotFound
	}
	if err != nil {
		return preset.Preset{}, dbError(err, "preset: get")
	}
	return p, nil
}

func scan(row pgx.Row) (preset.Preset, error) {
	var r versionRow
	if err := row.Scan(&r.id, &r.version, &r.created, &r.updated, &r.body); err != nil {
		return preset.Preset{}, err
	}
	return r.decode()
}

// A cursor is the (created_at, id) of the last item of a page, base64url("<unix µs>.<uuid>").
func cursorEncode(t time.Time, id uuid.UUID) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(t.UnixMicro(), 10) + "." + id.String()))
}

func cursorDecode(c string) (time.Time, uuid.UUID, error) {
	if c == "" {
		return time.Unix(0, 0), uuid.Nil, nil // before every row
	}
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return time.Time{}, uuid.Nil, preset.ErrInvalidCursor
	}
	us, idText, ok := strings.Cut(string(raw), ".")
	micros, err1 := strconv.ParseInt(us, 10, 64)
	id, err2 := uuid.Parse(idText)
	if !ok || err1 != nil || err2 != nil || !cursorTime(micros) {
		return time.Time{}, uuid.Nil, preset.ErrInvalidCursor
	}
	t := time.UnixMicro(micros)
	// Only the canonical spelling is a cursor this store produced (no "+1", braces, urn: ...).
	if cursorEncode(t, id) != c {
		return time.Time{}, uuid.Nil, preset.ErrInvalidCursor
	}
	return t, id, nil
}
