package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/secretbox"
)

// Tenant webhooks (docs/webhooks.md): a tenant's endpoints (webhook_endpoints) and the outbox of
// their deliveries (webhook_deliveries, migration 00010), which the append statement fills
// (derived.go: hookRows) and the delivery worker (pkg/worker) drains: it claims due deliveries
// with WebhookClaim, attempts them, and records each outcome with WebhookRecord.

// Errors of the webhook store.
var (
	ErrWebhookNotFound  = &fault.Error{Code: fault.NotFound, Message: "webhook endpoint not found"}
	ErrDeliveryNotFound = &fault.Error{Code: fault.NotFound, Message: "webhook delivery not found"}
	ErrDeliveryPending  = &fault.Error{Code: fault.Conflict, Message: "the delivery is still pending: it is retried on its schedule"}
	ErrWebhookDisabled  = &fault.Error{Code: fault.Conflict, Message: "the endpoint is disabled: enable it first"}
)

// TooManyWebhooksError refuses an endpoint beyond the tenant's bound.
func TooManyWebhooksError(max int) error {
	return &fault.Error{Code: fault.TooManyWebhooks,
		Message: fmt.Sprintf("a tenant has at most %d webhook endpoints; delete one first", max)}
}

// WebhookEndpoint is a tenant's endpoint as the API shows it (never its secret).
type WebhookEndpoint struct {
	ID          uuid.UUID  `json:"id"`
	URL         string     `json:"url"`
	Events      []string   `json:"events"`
	Description string     `json:"description"`
	CreatedAt   time.Time  `json:"createdAt"`
	DisabledAt  *time.Time `json:"disabledAt"`
}

// WebhookPatch changes an endpoint: the fields that are set. Disabling an endpoint gives up its
// pending deliveries (they fail with "the endpoint was disabled"); enabling it again delivers
// the events that happen from then on.
type WebhookPatch struct {
	URL         *string
	Events      []string // nil: unchanged
	Description *string
	Disabled    *bool
}

// Delivery states.
const (
	DeliveryPending   = "pending"
	DeliveryDelivered = "delivered"
	DeliveryFailed    = "failed"
)

// WebhookDelivery is one entry of an endpoint's delivery log.
type WebhookDelivery struct {
	ID            uuid.UUID  `json:"id"`
	EventID       string     `json:"eventId"`
	EventType     string     `json:"eventType"`
	Status        string     `json:"status"` // pending, delivered or failed
	CreatedAt     time.Time  `json:"createdAt"`
	Attempts      int        `json:"attempts"`
	LastStatus    *int       `json:"lastStatus"`
	LastError     *string    `json:"lastError"`
	DeliveredAt   *time.Time `json:"deliveredAt"`
	FailedAt      *time.Time `json:"failedAt"`
	NextAttemptAt *time.Time `json:"nextAttemptAt"` // while pending
}

// Webhooks is the store of tenant webhooks. It is safe for concurrent use.
type Webhooks struct{ s *Store }

// Webhooks returns the store of tenant webhooks over the same pool.
func (s *Store) Webhooks() *Webhooks { return &Webhooks{s: s} }

const endpointColumns = `id, url, events, description, created_at, disabled_at`

func scanEndpoint(row pgx.Row) (WebhookEndpoint, error) {
	var e WebhookEndpoint
	err := row.Scan(&e.ID, &e.URL, &e.Events, &e.Description, &e.CreatedAt, &e.DisabledAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return WebhookEndpoint{}, ErrWebhookNotFound
	}
	return e, err
}

// WebhookCreate stores a new endpoint of the tenant with a signing secret, unless the tenant
// already has max endpoints (TooManyWebhooksError). The URL and events are the caller's to check.
func (w *Webhooks) WebhookCreate(ctx context.Context, tenantID uuid.UUID, url string, events []string, description string,
	secret []byte, max int) (WebhookEndpoint, error) {
	var e WebhookEndpoint
	id := uuid.New()
	stored, err := w.seal(tenantID, id, secret)
	if err != nil {
		return WebhookEndpoint{}, err
	}
	err = pgx.BeginFunc(ctx, w.s.pool, func(tx pgx.Tx) error {
		// One creation at a time per tenant, so the bound holds under concurrent requests.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('dshd webhooks ' || $1::text, 0))`, tenantID); err != nil {
			return err
		}
		var err error
		e, err = scanEndpoint(tx.QueryRow(ctx, `INSERT INTO webhook_endpoints (id, tenant_id, url, events, secret, description, kek_id, wrapped_key)
			SELECT $1, $2, $3, $4, $5, $6, $8, $9 WHERE (SELECT count(*) FROM webhook_endpoints WHERE tenant_id = $2) < $7
			RETURNING `+endpointColumns, id, tenantID, url, events, stored.Ciphertext, description, max, stored.keyID(), stored.WrappedKey))
		if errors.Is(err, ErrWebhookNotFound) {
			return TooManyWebhooksError(max)
		}
		return err
	})
	if err != nil {
		return WebhookEndpoint{}, w.err(err, "webhook: create")
	}
	return e, nil
}

// err passes application errors through and translates the database's.
func (w *Webhooks) err(err error, what string) error {
	var fe *fault.Error
	if errors.As(err, &fe) {
		return err
	}
	return dbError(err, what)
}

// WebhookGet returns the tenant's endpoint id.
func (w *Webhooks) WebhookGet(ctx context.Context, tenantID, id uuid.UUID) (WebhookEndpoint, error) {
	e, err := scanEndpoint(w.s.pool.QueryRow(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints
		WHERE id = $1 AND tenant_id = $2`, id, tenantID))
	if err != nil {
		return WebhookEndpoint{}, w.err(err, "webhook: get")
	}
	return e, nil
}

// WebhookList returns up to limit of the tenant's endpoints in creation order after cursor
// ("" for the first page), and the cursor of the next page ("" after the last).
func (w *Webhooks) WebhookList(ctx context.Context, tenantID uuid.UUID, cursor string, limit int) ([]WebhookEndpoint, string, error) {
	after, afterID, err := cursorDecode(cursor)
	if err != nil {
		return nil, "", err
	}
	rows, err := w.s.pool.Query(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints
		WHERE tenant_id = $1 AND (created_at, id) > ($2, $3) ORDER BY created_at, id LIMIT $4`,
		tenantID, after, afterID, limit+1)
	if err != nil {
		return nil, "", dbError(err, "webhook: list")
	}
	items, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (WebhookEndpoint, error) { return scanEndpoint(r) })
	if err != nil {
		return nil, "", dbError(err, "webhook: list")
	}
	next := ""
	if len(items) > limit {
		items = items[:limit]
		next = cursorEncode(items[limit-1].CreatedAt, items[limit-1].ID)
	}
	return items, next, nil
}

// WebhookUpdate changes the tenant's endpoint id as p says and returns it. Disabling it fails
// its pending deliveries in the same statement.
func (w *Webhooks) WebhookUpdate(ctx context.Context, tenantID, id uuid.UUID, p WebhookPatch) (WebhookEndpoint, error) {
	e, err := scanEndpoint(w.s.pool.QueryRow(ctx, `
		WITH e AS (
			UPDATE webhook_endpoints SET url = coalesce($3, url), events = coalesce($4, events),
				description = coalesce($5, description),
				disabled_at = CASE WHEN $6::bool IS NULL THEN disabled_at WHEN $6 THEN coalesce(disabled_at, now()) END
			WHERE id = $1 AND tenant_id = $2
			RETURNING `+endpointColumns+`
		), gave_up AS (
			UPDATE webhook_deliveries d SET failed_at = now(), last_error = 'the endpoint was disabled'
			FROM e WHERE e.disabled_at IS NOT NULL AND d.endpoint_id = e.id
				AND d.delivered_at IS NULL AND d.failed_at IS NULL
		)
		SELECT `+endpointColumns+` FROM e`, id, tenantID, p.URL, p.Events, p.Description, p.Disabled))
	if err != nil {
		return WebhookEndpoint{}, w.err(err, "webhook: update")
	}
	return e, nil
}

// WebhookDelete deletes the tenant's endpoint id and its delivery log; its pending deliveries
// are not attempted again.
func (w *Webhooks) WebhookDelete(ctx context.Context, tenantID, id uuid.UUID) error {
	tag, err := w.s.pool.Exec(ctx, `DELETE FROM webhook_endpoints WHERE id = $1 AND tenant_id = $2`, id, tenantID)
	if err != nil {
		return dbError(err, "webhook: delete")
	}
	if tag.RowsAffected() == 0 {
		return ErrWebhookNotFound
	}
	return nil
}

// WebhookSetSecret replaces the signing secret of the tenant's endpoint id: attempts from now on
// are signed with the new one.
func (w *Webhooks) WebhookSetSecret(ctx context.Context, tenantID, id uuid.UUID, secret []byte) (WebhookEndpoint, error) {
	stored, err := w.seal(tenantID, id, secret)
	if err != nil {
		return WebhookEndpoint{}, err
	}
	e, err := scanEndpoint(w.s.pool.QueryRow(ctx, `UPDATE webhook_endpoints SET secret = $3, kek_id = $4, wrapped_key = $5
		WHERE id = $1 AND tenant_id = $2 RETURNING `+endpointColumns, id, tenantID, stored.Ciphertext, stored.keyID(), stored.WrappedKey))
	if err != nil {
		return WebhookEndpoint{}, w.err(err, "webhook: rotate secret")
	}
	return e, nil
}

const deliveryColumns = `id, event_id, event_type, created_at, attempts, last_status, last_error, delivered_at, failed_at, next_attempt_at`

func scanDelivery(row pgx.Row) (WebhookDelivery, error) {
	var d WebhookDelivery
	var next time.Time
	err := row.Scan(&d.ID, &d.EventID, &d.EventType, &d.CreatedAt, &d.Attempts, &d.LastStatus, &d.LastError,
		&d.DeliveredAt, &d.FailedAt, &next)
	if errors.Is(err, pgx.ErrNoRows) {
		return WebhookDelivery{}, ErrDeliveryNotFound
	}
	switch {
	case d.DeliveredAt != nil:
		d.Status = DeliveryDelivered
	case d.FailedAt != nil:
		d.Status = DeliveryFailed
	default:
		d.Status, d.NextAttemptAt = DeliveryPending, &next
	}
	return d, err
}

// WebhookDeliveries returns up to limit entries of the delivery log of the tenant's endpoint,
// newest first, after cursor ("" for the first page), and the cursor of the next page.
func (w *Webhooks) WebhookDeliveries(ctx context.Context, tenantID, endpointID uuid.UUID, cursor string, limit int) ([]WebhookDelivery, string, error) {
	before, beforeID, err := cursorDecode(cursor)
	if err != nil {
		return nil, "", err
	}
	if cursor == "" {
		before, beforeID = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), uuid.Max
	}
	if _, err := w.WebhookGet(ctx, tenantID, endpointID); err != nil {
		return nil, "", err
	}
	rows, err := w.s.pool.Query(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries
		WHERE endpoint_id = $1 AND tenant_id = $2 AND (created_at, id) < ($3, $4)
		ORDER BY created_at DESC, id DESC LIMIT $5`, endpointID, tenantID, before, beforeID, limit+1)
	if err != nil {
		return nil, "", dbError(err, "webhook: deliveries")
	}
	items, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (WebhookDelivery, error) { return scanDelivery(r) })
	if err != nil {
		return nil, "", dbError(err, "webhook: deliveries")
	}
	next := ""
	if len(items) > limit {
		items = items[:limit]
		next = cursorEncode(items[limit-1].CreatedAt, items[limit-1].ID)
	}
	return items, next, nil
}

// WebhookRedeliver schedules a delivered or failed delivery of the tenant's endpoint again, at
// once, with a fresh retry schedule (attempts start from 0). A pending one is ErrDeliveryPending,
// one of a disabled endpoint ErrWebhookDisabled.
func (w *Webhooks) WebhookRedeliver(ctx context.Context, tenantID, endpointID, deliveryID uuid.UUID) (WebhookDelivery, error) {
	var d WebhookDelivery
	err := pgx.BeginFunc(ctx, w.s.pool, func(tx pgx.Tx) error {
		var pending, disabled bool
		err := tx.QueryRow(ctx, `SELECT d.delivered_at IS NULL AND d.failed_at IS NULL, e.disabled_at IS NOT NULL
			FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id
			WHERE d.id = $3 AND d.endpoint_id = $1 AND e.tenant_id = $2 FOR UPDATE OF d`,
			endpointID, tenantID, deliveryID).Scan(&pending, &disabled)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return ErrDeliveryNotFound
		case err != nil:
			return err
		case pending:
			return ErrDeliveryPending
		case disabled:
			return ErrWebhookDisabled
		}
		d, err = scanDelivery(tx.QueryRow(ctx, `UPDATE webhook_deliveries SET attempts = 0, delivered_at = NULL,
			failed_at = NULL, next_attempt_at = now() WHERE id = $1 RETURNING `+deliveryColumns, deliveryID))
		return err
	})
	if err != nil {
		return WebhookDelivery{}, w.err(err, "webhook: redeliver")
	}
	return d, nil
}

// WebhookAttempt is a claimed delivery: what one attempt sends, and the attempt number that
// fences its record.
type WebhookAttempt struct {
	ID        uuid.UUID
	TenantID  uuid.UUID
	EventID   string
	EventType string
	URL       string
	Secret    []byte
	Body      []byte // the stored payload, sent as is
	Attempt   int    // 1 for the first
	Disabled  bool   // the endpoint was disabled meanwhile: record a failure, send nothing
	// SecretErr says the signing secret did not decrypt with the configured keys (the operator
	// removed the key that sealed it): send nothing, retry on the schedule.
	SecretErr error
}

// WebhookClaim claims up to limit due deliveries for attempts by this replica: each one's
// attempt count goes up and its next attempt moves lease ahead, so a replica that dies during
// the attempt leaves it to be claimed again after lease (at least once). A due delivery that
// already had maxAttempts attempts (its last one never finished) fails instead. Concurrent
// claimers on other replicas skip the rows being claimed.
func (w *Webhooks) WebhookClaim(ctx context.Context, limit int, lease time.Duration, maxAttempts int) ([]WebhookAttempt, error) {
	rows, err := w.s.pool.Query(ctx, `
		WITH due AS (
			SELECT id FROM webhook_deliveries
			WHERE delivered_at IS NULL AND failed_at IS NULL AND next_attempt_at <= now()
			ORDER BY next_attempt_at LIMIT $1 FOR UPDATE SKIP LOCKED
		), upd AS (
			UPDATE webhook_deliveries d SET
				attempts = d.attempts + CASE WHEN d.attempts < $3 THEN 1 ELSE 0 END,
				next_attempt_at = now() + $2 * interval '1 millisecond',
				failed_at = CASE WHEN d.attempts >= $3 THEN now() END,
				last_error = CASE WHEN d.attempts >= $3 THEN 'gave up: the last attempt did not finish' ELSE d.last_error END
			FROM due WHERE d.id = due.id
			RETURNING d.id, d.tenant_id, d.endpoint_id, d.event_id, d.event_type, d.payload, d.attempts, d.failed_at
		)
		SELECT upd.id, upd.tenant_id, upd.event_id, upd.event_type, e.url, e.secret, upd.payload::text, upd.attempts,
			e.disabled_at IS NOT NULL, e.id, e.kek_id, e.wrapped_key
		FROM upd JOIN webhook_endpoints e ON e.id = upd.endpoint_id
		WHERE upd.failed_at IS NULL`, limit, lease.Milliseconds(), maxAttempts)
	if err != nil {
		return nil, dbError(err, "webhook: claim")
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (WebhookAttempt, error) {
		var a WebhookAttempt
		var body string
		var endpoint uuid.UUID
		var s storedSecret
		err := r.Scan(&a.ID, &a.TenantID, &a.EventID, &a.EventType, &a.URL, &s.Ciphertext, &body, &a.Attempt, &a.Disabled,
			&endpoint, &s.kek, &s.WrappedKey)
		a.Body = []byte(body)
		if err == nil {
			a.Secret, a.SecretErr = w.open(a.TenantID, endpoint, s)
		}
		return a, err
	})
	if err != nil {
		return nil, dbError(err, "webhook: claim")
	}
	return out, nil
}

// WebhookOutcome is what became of an attempt.
type WebhookOutcome struct {
	Status    int           // the HTTP status, 0 for none
	Error     string        // "" when it succeeded
	RetryIn   time.Duration // when it failed and may be retried: the wait
	GiveUp    bool          // when it failed for the last time
	Delivered bool
}

// WebhookRecord records the outcome of attempt a: delivered, failed for good, or due again
// after o.RetryIn. It records nothing (false) when the delivery was claimed again meanwhile
// (this attempt's lease ran out), was deleted, or is no longer pending.
func (w *Webhooks) WebhookRecord(ctx context.Context, a WebhookAttempt, o WebhookOutcome) (bool, error) {
	var status *int
	if o.Status != 0 {
		status = &o.Status
	}
	var lastErr *string
	if !o.Delivered {
		lastErr = &o.Error
	}
	tag, err := w.s.pool.Exec(ctx, `UPDATE webhook_deliveries SET last_status = $3, last_error = $4,
			delivered_at = CASE WHEN $5 THEN now() END,
			failed_at = CASE WHEN NOT $5 AND $6 THEN now() END,
			next_attempt_at = CASE WHEN $5 OR $6 THEN next_attempt_at ELSE now() + $7 * interval '1 millisecond' END
		WHERE id = $1 AND attempts = $2 AND delivered_at IS NULL AND failed_at IS NULL`,
		a.ID, a.Attempt, status, lastErr, o.Delivered, o.GiveUp, o.RetryIn.Milliseconds())
	if err != nil {
		return false, dbError(err, "webhook: record")
	}
	return tag.RowsAffected() == 1, nil
}

// WebhookExpire deletes delivered and failed deliveries older than age, at most limit of them,
// and returns how many it deleted.
func (w *Webhooks) WebhookExpire(ctx context.Context, age time.Duration, limit int) (int64, error) {
	tag, err := w.s.pool.Exec(ctx, `DELETE FROM webhook_deliveries WHERE id IN (
		SELECT id FROM webhook_deliveries
		WHERE coalesce(delivered_at, failed_at) < now() - $1 * interval '1 millisecond' LIMIT $2)`,
		age.Milliseconds(), limit)
	if err != nil {
		return 0, dbError(err, "webhook: expire")
	}
	return tag.RowsAffected(), nil
}

// A webhook signing secret as stored (migration 00014): sealed by the store's keyring when it has
// one (kek set), as it is otherwise.
type storedSecret struct {
	secretbox.Sealed
	kek *string
}

func (s storedSecret) keyID() *string { return s.kek }

// ErrWebhookSecretSealed reports a signing secret sealed by a key the server does not have.
var ErrWebhookSecretSealed = errors.New("webhook: the signing secret is sealed by a key that is not configured (DSHD_CREDENTIAL_KEYS)")

// webhookAAD binds a sealed signing secret to its tenant and endpoint.
func webhookAAD(tenantID, endpoint uuid.UUID) []byte {
	return []byte("dshd webhook secret " + tenantID.String() + " " + endpoint.String())
}

// seal returns secret as it is to be stored for the tenant's endpoint.
func (w *Webhooks) seal(tenantID, endpoint uuid.UUID, secret []byte) (storedSecret, error) {
	if w.s.secrets == nil {
		return storedSecret{Sealed: secretbox.Sealed{Ciphertext: secret}}, nil
	}
	sealed, err := w.s.secrets.Seal(secret, webhookAAD(tenantID, endpoint))
	if err != nil {
		return storedSecret{}, fmt.Errorf("webhook: seal the signing secret: %w", err)
	}
	return storedSecret{Sealed: sealed, kek: &sealed.KeyID}, nil
}

// open returns the signing secret of a stored row.
func (w *Webhooks) open(tenantID, endpoint uuid.UUID, s storedSecret) ([]byte, error) {
	if s.kek == nil {
		return s.Ciphertext, nil
	}
	if w.s.secrets == nil {
		return nil, ErrWebhookSecretSealed
	}
	s.KeyID = *s.kek
	secret, err := w.s.secrets.Open(s.Sealed, webhookAAD(tenantID, endpoint))
	if err != nil {
		return nil, ErrWebhookSecretSealed
	}
	return secret, nil
}

// WebhookRewrap seals every signing secret stored as it is and moves every sealed one to the
// keyring's active key (the operator key's rotation, with the credentials' Rewrap). A secret
// that does not open is counted as failed and left alone. Safe while replicas serve: each row is
// replaced only as it was read.
func (w *Webhooks) WebhookRewrap(ctx context.Context) (RewrapResult, error) {
	var res RewrapResult
	if w.s.secrets == nil {
		return res, errors.New("webhook: rewrap: no keyring (DSHD_CREDENTIAL_KEYS)")
	}
	type row struct {
		id, tenantID uuid.UUID
		stored       storedSecret
	}
	rows, err := w.s.pool.Query(ctx, `SELECT id, tenant_id, secret, kek_id, wrapped_key FROM webhook_endpoints ORDER BY id`)
	if err != nil {
		return res, dbError(err, "webhook: rewrap")
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.id, &x.tenantID, &x.stored.Ciphertext, &x.stored.kek, &x.stored.WrappedKey)
		return x, err
	})
	if err != nil {
		return res, dbError(err, "webhook: rewrap")
	}
	for _, x := range all {
		if x.stored.kek != nil && *x.stored.kek == w.s.secrets.ActiveID() {
			res.Current++
			continue
		}
		secret, err := w.open(x.tenantID, x.id, x.stored)
		if err != nil {
			res.Failed++
			continue
		}
		next, err := w.seal(x.tenantID, x.id, secret)
		if err != nil {
			return res, err
		}
		tag, err := w.s.pool.Exec(ctx, `UPDATE webhook_endpoints SET secret = $3, kek_id = $4, wrapped_key = $5
			WHERE id = $1 AND kek_id IS NOT DISTINCT FROM $2`, x.id, x.stored.kek, next.Ciphertext, next.kek, next.WrappedKey)
		if err != nil {
			return res, dbError(err, "webhook: rewrap")
		}
		if tag.RowsAffected() == 1 {
			res.Rewrapped++
		} else {
			res.Current++
		}
	}
	if res.Failed > 0 {
		return res, fmt.Errorf("webhook: rewrap: %d signing secrets did not open with the configured keys", res.Failed)
	}
	return res, nil
}
