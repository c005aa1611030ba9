package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/secretbox"
)

// Tenant webhooks (docs/webhooks.md): a tenant's endpoints (webhook_endpoints) and the outbox of
// their deliveries (webhook_deliveries, migrations 00010 and 00016), which the append statement fills
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
// the events that happen from then on. A new URL or enabling it clears its backoff.
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
type Webhooks struct {
	s *Store
	// rewrapRead, when set, runs where WebhookRewrap has read a row and not yet replaced it
	// (tests change the row in between).
	rewrapRead func(endpoint uuid.UUID)
}

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

// hookTime is t as a webhook event's createdAt: JSON of the UTC time to the millisecond, the form
// the append path's events have (derived.go: hookRows), whichever path writes the event.
func hookTime(t time.Time) string {
	b, _ := json.Marshal(time.UnixMilli(t.UnixMilli()).UTC())
	return string(b)
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
				disabled_at = CASE WHEN $6::bool IS NULL THEN disabled_at WHEN $6 THEN coalesce(disabled_at, now()) END,
				-- a new URL, or enabling it again, starts without the old failures and backoff
				failures = CASE WHEN $3::text IS NOT NULL OR NOT $6 THEN 0 ELSE failures END,
				backoff_until = CASE WHEN $3::text IS NOT NULL OR NOT $6 THEN NULL ELSE backoff_until END
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
		// A fresh schedule, and no claim: an attempt still under way from before records nothing.
		d, err = scanDelivery(tx.QueryRow(ctx, `UPDATE webhook_deliveries SET attempts = 0, delivered_at = NULL,
			failed_at = NULL, next_attempt_at = now(), claim_token = NULL WHERE id = $1 RETURNING `+deliveryColumns, deliveryID))
		return err
	})
	if err != nil {
		return WebhookDelivery{}, w.err(err, "webhook: redeliver")
	}
	return d, nil
}

// WebhookAttempt is a claimed delivery: what one attempt sends, and the claim's token that fences
// its record.
type WebhookAttempt struct {
	ID         uuid.UUID
	TenantID   uuid.UUID
	EndpointID uuid.UUID
	EventID    string
	EventType  string
	URL        string
	Secret     []byte
	Body       []byte    // the stored payload, sent as is
	Attempt    int       // 1 for the first
	Token      uuid.UUID // this claim's: only its record is taken
	Disabled   bool      // the endpoint was disabled meanwhile: record a failure, send nothing
	// EndpointFailures is the endpoint's failed attempts in a row when it was claimed (its
	// backoff, WebhookOutcome.EndpointBackoff, depends on it).
	EndpointFailures int
	// SecretErr says the signing secret did not decrypt with the configured keys (the operator
	// removed the key that sealed it): send nothing, retry on the schedule.
	SecretErr error
}

// WebhookClaim claims up to limit due deliveries for attempts by this replica: each one's
// attempt count goes up, it gets a fresh claim token, and its next attempt moves lease ahead, so
// a replica that dies during the attempt leaves it to be claimed again after lease (at least
// once). A due delivery that already had maxAttempts attempts (its last one never finished)
// fails instead. Concurrent claimers on other replicas skip the rows being claimed.
//
// The claim is fair between endpoints (so between tenants): it takes the oldest due deliveries
// but at most perEndpoint (at least 1) in flight per endpoint, counting the attempts under way on
// every replica, and none of an endpoint that is backed off (WebhookOutcome.EndpointBackoff). An
// endpoint that hangs therefore holds at most perEndpoint attempts, not every worker.
func (w *Webhooks) WebhookClaim(ctx context.Context, limit int, lease time.Duration, maxAttempts, perEndpoint int) ([]WebhookAttempt, error) {
	rows, err := w.s.pool.Query(ctx, `
		WITH busy AS (
			-- attempts under way (claimed, lease not run out), by endpoint
			SELECT endpoint_id, count(*) AS n FROM webhook_deliveries
			WHERE claim_token IS NOT NULL AND delivered_at IS NULL AND failed_at IS NULL AND next_attempt_at > now()
			GROUP BY endpoint_id
		), ranked AS (
			SELECT d.id, d.next_attempt_at,
				coalesce(b.n, 0) + row_number() OVER (PARTITION BY d.endpoint_id ORDER BY d.next_attempt_at, d.id) AS slot
			FROM webhook_deliveries d
				JOIN webhook_endpoints e ON e.id = d.endpoint_id
				LEFT JOIN busy b ON b.endpoint_id = d.endpoint_id
			WHERE d.delivered_at IS NULL AND d.failed_at IS NULL AND d.next_attempt_at <= now()
				AND (e.backoff_until IS NULL OR e.backoff_until <= now())
		), due AS (
			-- the conditions again: a row another claimer committed meanwhile is seen as it is now
			SELECT d.id FROM webhook_deliveries d
			WHERE d.id IN (SELECT id FROM ranked WHERE slot <= greatest($4, 1) ORDER BY next_attempt_at, id LIMIT $1)
				AND d.delivered_at IS NULL AND d.failed_at IS NULL AND d.next_attempt_at <= now()
			FOR UPDATE OF d SKIP LOCKED
		), upd AS (
			UPDATE webhook_deliveries d SET
				attempts = d.attempts + CASE WHEN d.attempts < $3 THEN 1 ELSE 0 END,
				next_attempt_at = now() + $2 * interval '1 millisecond',
				claim_token = CASE WHEN d.attempts < $3 THEN gen_random_uuid() END,
				failed_at = CASE WHEN d.attempts >= $3 THEN now() END,
				last_error = CASE WHEN d.attempts >= $3 THEN 'gave up: the last attempt did not finish' ELSE d.last_error END
			FROM due WHERE d.id = due.id
			RETURNING d.id, d.tenant_id, d.endpoint_id, d.event_id, d.event_type, d.payload, d.attempts, d.failed_at, d.claim_token
		)
		SELECT upd.id, upd.tenant_id, upd.event_id, upd.event_type, e.url, e.secret, upd.payload::text, upd.attempts,
			e.disabled_at IS NOT NULL, e.id, e.kek_id, e.wrapped_key, upd.claim_token, e.failures
		FROM upd JOIN webhook_endpoints e ON e.id = upd.endpoint_id
		WHERE upd.failed_at IS NULL`, limit, lease.Milliseconds(), maxAttempts, perEndpoint)
	if err != nil {
		return nil, dbError(err, "webhook: claim")
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (WebhookAttempt, error) {
		var a WebhookAttempt
		var body string
		var s storedSecret
		err := r.Scan(&a.ID, &a.TenantID, &a.EventID, &a.EventType, &a.URL, &s.Ciphertext, &body, &a.Attempt, &a.Disabled,
			&a.EndpointID, &s.kek, &s.WrappedKey, &a.Token, &a.EndpointFailures)
		a.Body = []byte(body)
		if err == nil {
			a.Secret, a.SecretErr = w.open(a.TenantID, a.EndpointID, s)
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
	// EndpointBackoff, when it failed and is positive, backs the endpoint off: none of its
	// deliveries is attempted for that long (those waiting have their next attempt moved to the
	// end of it). The worker sets it once the endpoint failed too many times in a row.
	EndpointBackoff time.Duration
}

// WebhookRecord records the outcome of attempt a: delivered, failed for good, or due again
// after o.RetryIn, and counts it on the endpoint (a success clears the endpoint's failures in a
// row and its backoff, a failure adds one, and o.EndpointBackoff backs it off). It records
// nothing (false) when a's claim no longer holds the delivery (its lease ran out and another
// claim took it, or it was redelivered), or the delivery was deleted or is no longer pending.
func (w *Webhooks) WebhookRecord(ctx context.Context, a WebhookAttempt, o WebhookOutcome) (bool, error) {
	var status *int
	if o.Status != 0 {
		status = &o.Status
	}
	var lastErr *string
	if !o.Delivered {
		lastErr = &o.Error
	}
	backoff := int64(0)
	if !o.Delivered && o.EndpointBackoff > 0 {
		backoff = o.EndpointBackoff.Milliseconds()
	}
	// The record locks the endpoint's row (its failures and backoff), then the deliveries it
	// pushes back; a concurrent record of the same endpoint locked its own delivery first, so each
	// transaction takes the endpoint's row before anything else: records of one endpoint then
	// follow each other instead of deadlocking. A deadlock with a claim is retried (the statement
	// is fenced by the claim token, so it applies at most once).
	var n int
	var err error
	for try := 0; ; try++ {
		n, err = w.record(ctx, a, status, lastErr, o, backoff)
		var pgErr *pgconn.PgError
		if try < 3 && errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001") {
			continue
		}
		break
	}
	if err != nil {
		return false, dbError(err, "webhook: record")
	}
	return n == 1, nil
}

// record runs WebhookRecord's statement in a transaction that locks the endpoint's row first.
func (w *Webhooks) record(ctx context.Context, a WebhookAttempt, status *int, lastErr *string, o WebhookOutcome, backoff int64) (int, error) {
	var n int
	err := pgx.BeginFunc(ctx, w.s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT 1 FROM webhook_endpoints WHERE id = $1 FOR UPDATE`, a.EndpointID); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `
		WITH rec AS (
			UPDATE webhook_deliveries SET last_status = $3, last_error = $4, claim_token = NULL,
				delivered_at = CASE WHEN $5 THEN now() END,
				failed_at = CASE WHEN NOT $5 AND $6 THEN now() END,
				next_attempt_at = CASE WHEN $5 OR $6 THEN next_attempt_at
					ELSE now() + greatest($7::bigint, $8::bigint) * interval '1 millisecond' END
			WHERE id = $1 AND claim_token = $2 AND delivered_at IS NULL AND failed_at IS NULL
			RETURNING endpoint_id
		), ep AS (
			UPDATE webhook_endpoints e SET
				failures = CASE WHEN $5 THEN 0 ELSE e.failures + 1 END,
				backoff_until = CASE WHEN $5 THEN NULL WHEN $8 > 0 THEN now() + $8 * interval '1 millisecond'
					ELSE e.backoff_until END
			FROM rec WHERE e.id = rec.endpoint_id
			RETURNING e.id, e.backoff_until
		), pushed AS (
			-- the endpoint's waiting deliveries move to the end of its backoff
			UPDATE webhook_deliveries d SET next_attempt_at = ep.backoff_until
			FROM ep WHERE $8 > 0 AND d.endpoint_id = ep.id AND d.id <> $1 AND d.claim_token IS NULL
				AND d.delivered_at IS NULL AND d.failed_at IS NULL AND d.next_attempt_at < ep.backoff_until
		)
		SELECT count(*) FROM rec`,
			a.ID, a.Token, status, lastErr, o.Delivered, o.GiveUp, o.RetryIn.Milliseconds(), backoff).Scan(&n)
	})
	return n, err
}

// WebhookExpire deletes delivered and failed deliveries that settled more than age ago, at most
// limit of them (one pass; the caller repeats while a pass deletes limit), and returns how many
// it deleted. The partial index webhook_deliveries_settled (migration 00016) serves it.
func (w *Webhooks) WebhookExpire(ctx context.Context, age time.Duration, limit int) (int64, error) {
	tag, err := w.s.pool.Exec(ctx, `DELETE FROM webhook_deliveries WHERE id IN (
		SELECT id FROM webhook_deliveries
		WHERE (delivered_at IS NOT NULL OR failed_at IS NOT NULL)
			AND coalesce(delivered_at, failed_at) < now() - $1 * interval '1 millisecond'
		LIMIT $2)`,
		age.Milliseconds(), limit)
	if err != nil {
		return 0, dbError(err, "webhook: expire")
	}
	return tag.RowsAffected(), nil
}

// WebhookAbandon fails pending deliveries created more than age ago and not under way (an
// endpoint backed off for that long keeps its deliveries waiting, and they would otherwise wait
// without bound), at most limit of them, and returns how many it failed.
func (w *Webhooks) WebhookAbandon(ctx context.Context, age time.Duration, limit int) (int64, error) {
	tag, err := w.s.pool.Exec(ctx, `UPDATE webhook_deliveries SET failed_at = now(), claim_token = NULL,
			last_error = 'gave up: not delivered within the retention'
		WHERE id IN (
			SELECT id FROM webhook_deliveries
			WHERE delivered_at IS NULL AND failed_at IS NULL AND created_at < now() - $1 * interval '1 millisecond'
				AND (claim_token IS NULL OR next_attempt_at <= now())
			LIMIT $2 FOR UPDATE SKIP LOCKED)
			AND delivered_at IS NULL AND failed_at IS NULL`,
		age.Milliseconds(), limit)
	if err != nil {
		return 0, dbError(err, "webhook: abandon")
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
// replaced only while it still holds what was read (secret, wrapped key and key id), so a secret
// rotated meanwhile (rotate-secret on another replica) is never overwritten by the old one; such
// a row is read again and rewrapped as it is now.
func (w *Webhooks) WebhookRewrap(ctx context.Context) (RewrapResult, error) {
	var res RewrapResult
	if w.s.secrets == nil {
		return res, errors.New("webhook: rewrap: no keyring (DSHD_CREDENTIAL_KEYS)")
	}
	rows, err := w.s.pool.Query(ctx, `SELECT id FROM webhook_endpoints ORDER BY id`)
	if err != nil {
		return res, dbError(err, "webhook: rewrap")
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return res, dbError(err, "webhook: rewrap")
	}
	for _, id := range ids {
		if err := w.rewrapOne(ctx, id, &res); err != nil {
			return res, err
		}
	}
	if res.Failed > 0 {
		return res, fmt.Errorf("webhook: rewrap: %d signing secrets did not open with the configured keys", res.Failed)
	}
	return res, nil
}

// rewrapOne rewraps endpoint id's secret, counting the outcome in res: it reads the row, seals
// its secret under the active key and replaces it only if the row is unchanged, trying again a
// few times when it changed meanwhile (gone: nothing to do).
func (w *Webhooks) rewrapOne(ctx context.Context, id uuid.UUID, res *RewrapResult) error {
	for range 5 {
		var tenantID uuid.UUID
		var old storedSecret
		err := w.s.pool.QueryRow(ctx, `SELECT tenant_id, secret, kek_id, wrapped_key FROM webhook_endpoints WHERE id = $1`, id).
			Scan(&tenantID, &old.Ciphertext, &old.kek, &old.WrappedKey)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // deleted meanwhile
		}
		if err != nil {
			return dbError(err, "webhook: rewrap")
		}
		if old.kek != nil && *old.kek == w.s.secrets.ActiveID() {
			res.Current++
			return nil
		}
		secret, err := w.open(tenantID, id, old)
		if err != nil {
			res.Failed++
			return nil
		}
		next, err := w.seal(tenantID, id, secret)
		if err != nil {
			return err
		}
		if w.rewrapRead != nil {
			w.rewrapRead(id)
		}
		tag, err := w.s.pool.Exec(ctx, `UPDATE webhook_endpoints SET secret = $5, kek_id = $6, wrapped_key = $7
			WHERE id = $1 AND secret = $2 AND kek_id IS NOT DISTINCT FROM $3 AND wrapped_key IS NOT DISTINCT FROM $4`,
			id, old.Ciphertext, old.kek, old.WrappedKey, next.Ciphertext, next.kek, next.WrappedKey)
		if err != nil {
			return dbError(err, "webhook: rewrap")
		}
		if tag.RowsAffected() == 1 {
			res.Rewrapped++
			return nil
		}
		// The secret changed meanwhile (rotated, or rewrapped by another run): read it again.
	}
	return fmt.Errorf("webhook: rewrap: endpoint %s changed at every try; run the rewrap again", id)
}
