package pgstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dshd/dshd/pkg/fault"
)

// Creates records the idempotency keys of the requests that create a resource (table
// idempotent_creates). A request with a key claims it (Claim); the request that claimed it
// creates the resource and records its answer (Complete) or gives the claim up (Release); any
// other request with the key waits until the claim settles, then replays the recorded answer, or
// claims the key itself when the first request gave it up. So concurrent requests with one key
// create one resource, and no connection is held while the resource is created. Keys expire with
// the posts' (Store.IdempotencyExpire).
type Creates struct {
	pool *pgxpool.Pool
	// Stale is how long a claim may stay unsettled before another request with its key takes it
	// over (the request that claimed it died before it settled it). Default DefaultCreateStale.
	Stale time.Duration
}

// ErrCreateClaimLost: Complete found its claim taken over by a later request with the key (it
// came after Stale) or released; the answer is not recorded.
var ErrCreateClaimLost = errors.New("the claim was taken over")

// DefaultCreateStale is the default Creates.Stale: longer than a create takes.
const DefaultCreateStale = 2 * time.Minute

// NewCreates returns the idempotency records of creates over pool.
func NewCreates(pool *pgxpool.Pool) *Creates { return &Creates{pool: pool, Stale: DefaultCreateStale} }

// Creates returns the idempotency records of creates over the store's pool.
func (s *Store) Creates() *Creates { return NewCreates(s.pool) }

// Creates returns the idempotency records of creates over the presets' pool.
func (p *Presets) Creates() *Creates { return NewCreates(p.pool) }

// Creates returns the idempotency records of creates over the tenants' pool.
func (t *Tenants) Creates() *Creates { return NewCreates(t.pool) }

// Creates returns the idempotency records of creates over the credentials' pool.
func (c *Credentials) Creates() *Creates { return NewCreates(c.pool) }

// Creates returns the idempotency records of creates over the webhooks' pool.
func (h *Webhooks) Creates() *Creates { return NewCreates(h.s.pool) }

// CreateKey names one idempotency key: Scope is the tenant (or "admin"), Route the create, Hash
// the digest of the request the key was first used with.
type CreateKey struct {
	Scope, Route, Key string
	Hash              []byte
}

// CreateAnswer is the recorded answer of a create.
type CreateAnswer struct {
	Status int
	Body   []byte
}

// CreateClaim is the outcome of Claim: either the caller holds the key (Token set: create, then
// Complete or Release) or the key's earlier answer is to be replayed (Replay set).
type CreateClaim struct {
	Token  uuid.UUID
	Replay *CreateAnswer
}

// ErrCreateConflict is returned by Claim when the key was used before with a different request.
var ErrCreateConflict = &fault.Error{Code: fault.IdempotencyConflict,
	Message: "the Idempotency-Key was used before with a different request"}

// Claim claims the key or finds its earlier answer. It waits (polling, until ctx ends) while
// another request holds an unsettled claim of the key.
func (c *Creates) Claim(ctx context.Context, k CreateKey) (CreateClaim, error) {
	wait := 5 * time.Millisecond
	for {
		token := uuid.New()
		tag, err := c.pool.Exec(ctx, `INSERT INTO idempotent_creates (scope, route, key, request_hash, claim)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING`, k.Scope, k.Route, k.Key, k.Hash, token)
		if err != nil {
			return CreateClaim{}, translate(err, "claim idempotency key")
		}
		if tag.RowsAffected() == 1 {
			return CreateClaim{Token: token}, nil
		}
		var (
			hash   []byte
			claim  uuid.UUID
			stale  bool
			status *int
			body   []byte
		)
		err = c.pool.QueryRow(ctx, `SELECT request_hash, claim, claimed_at < now() - $4 * interval '1 millisecond', status, body
			FROM idempotent_creates WHERE scope = $1 AND route = $2 AND key = $3`,
			k.Scope, k.Route, k.Key, c.stale().Milliseconds()).Scan(&hash, &claim, &stale, &status, &body)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			continue // released meanwhile: claim it
		case err != nil:
			return CreateClaim{}, translate(err, "read idempotency key")
		case !bytes.Equal(hash, k.Hash):
			return CreateClaim{}, ErrCreateConflict
		case status != nil:
			return CreateClaim{Replay: &CreateAnswer{Status: *status, Body: body}}, nil
		case stale:
			tag, err := c.pool.Exec(ctx, `UPDATE idempotent_creates SET claim = $5, claimed_at = now()
				WHERE scope = $1 AND route = $2 AND key = $3 AND claim = $4 AND status IS NULL`,
				k.Scope, k.Route, k.Key, claim, token)
			if err != nil {
				return CreateClaim{}, translate(err, "take over idempotency key")
			}
			if tag.RowsAffected() == 1 {
				return CreateClaim{Token: token}, nil
			}
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return CreateClaim{}, ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}

func (c *Creates) stale() time.Duration {
	if c.Stale <= 0 {
		return DefaultCreateStale
	}
	return c.Stale
}

// Complete records the answer of the create that holds the claim token. It runs even when ctx
// is cancelled (the resource exists: its key must replay it).
func (c *Creates) Complete(ctx context.Context, k CreateKey, token uuid.UUID, a CreateAnswer) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	// The resource exists: an answer not recorded lets a retry after Stale create it again, so a
	// database that is briefly unavailable is retried for up to the 10 s.
	r := &retrier{bound: 10 * time.Second, logger: slog.Default()}
	for {
		tag, err := c.pool.Exec(ctx, `UPDATE idempotent_creates SET status = $5, body = $6
			WHERE scope = $1 AND route = $2 AND key = $3 AND claim = $4`, k.Scope, k.Route, k.Key, token, a.Status, a.Body)
		if err = translate(err, "record idempotency key"); err == nil {
			if tag.RowsAffected() == 0 {
				return fmt.Errorf("idempotency key %q of %s: %w (the create ran longer than %s)", k.Key, k.Route, ErrCreateClaimLost, c.Stale)
			}
			return nil
		}
		if !r.again(ctx, err, "record idempotency key") {
			return err
		}
	}
}

// Release gives up the claim token's claim (the create failed): the next request with the key
// creates.
func (c *Creates) Release(ctx context.Context, k CreateKey, token uuid.UUID) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_, err := c.pool.Exec(ctx, `DELETE FROM idempotent_creates
		WHERE scope = $1 AND route = $2 AND key = $3 AND claim = $4 AND status IS NULL`, k.Scope, k.Route, k.Key, token)
	return translate(err, "release idempotency key")
}
