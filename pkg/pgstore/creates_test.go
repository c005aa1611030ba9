package pgstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/internal/pgtest"
	"github.com/dshd/dshd/pkg/pgstore"
)

// TestCreatesClaim: the first Claim of a key holds it; Complete records the answer every later
// Claim with the same hash replays; another hash conflicts; Release lets the next Claim hold it;
// keys are per scope and route.
func TestCreatesClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := pgstore.NewCreates(pgtest.Pool(t))
	scope := uuid.NewString()
	k := pgstore.CreateKey{Scope: scope, Route: "POST /v1/things", Key: "k1", Hash: []byte("h1")}

	first, err := c.Claim(ctx, k)
	if err != nil || first.Token == uuid.Nil || first.Replay != nil {
		t.Fatalf("first claim %+v, %v", first, err)
	}
	// Released: the next claim holds the key.
	if err := c.Release(ctx, k, first.Token); err != nil {
		t.Fatal(err)
	}
	second, err := c.Claim(ctx, k)
	if err != nil || second.Token == uuid.Nil || second.Token == first.Token {
		t.Fatalf("claim after release %+v, %v", second, err)
	}
	// Completing with a token that no longer holds the key records nothing, and says so.
	if err := c.Complete(ctx, k, first.Token, pgstore.CreateAnswer{Status: 201, Body: []byte(`{"id":"stale"}`)}); !errors.Is(err, pgstore.ErrCreateClaimLost) {
		t.Fatalf("a stale token's Complete: %v, want ErrCreateClaimLost", err)
	}
	if err := c.Complete(ctx, k, second.Token, pgstore.CreateAnswer{Status: 201, Body: []byte(`{"id":"a"}`)}); err != nil {
		t.Fatal(err)
	}
	replay, err := c.Claim(ctx, k)
	if err != nil || replay.Replay == nil || replay.Replay.Status != 201 || string(replay.Replay.Body) != `{"id":"a"}` {
		t.Fatalf("replay %+v, %v", replay, err)
	}
	// Release after Complete keeps the answer.
	if err := c.Release(ctx, k, second.Token); err != nil {
		t.Fatal(err)
	}
	if replay, err = c.Claim(ctx, k); err != nil || replay.Replay == nil {
		t.Fatalf("replay after a late release %+v, %v", replay, err)
	}
	other := k
	other.Hash = []byte("h2")
	if _, err := c.Claim(ctx, other); !errors.Is(err, pgstore.ErrCreateConflict) {
		t.Fatalf("another request with the key: %v, want ErrCreateConflict", err)
	}
	// Another route or scope: its own key.
	for _, o := range []pgstore.CreateKey{{Scope: scope, Route: "POST /v1/others", Key: "k1", Hash: []byte("h2")},
		{Scope: uuid.NewString(), Route: k.Route, Key: "k1", Hash: []byte("h2")}} {
		if cl, err := c.Claim(ctx, o); err != nil || cl.Token == uuid.Nil {
			t.Fatalf("claim of %+v: %+v, %v", o, cl, err)
		}
	}
}

// TestCreatesClaimWaits: a Claim of a key another holds waits until the holder settles it, then
// replays its answer (or holds the key when it was released); concurrent Claims of a fresh key
// give it to exactly one.
func TestCreatesClaimWaits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := pgstore.NewCreates(pgtest.Pool(t))
	k := pgstore.CreateKey{Scope: uuid.NewString(), Route: "POST /v1/things", Key: "k", Hash: []byte("h")}
	const n = 8
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		holders []uuid.UUID
		errs    []error
	)
	replays := make(chan pgstore.CreateClaim, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl, err := c.Claim(ctx, k)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				errs = append(errs, err)
			case cl.Token != uuid.Nil:
				holders = append(holders, cl.Token)
				// The holder settles its claim while the others wait.
				errs = append(errs, c.Complete(ctx, k, cl.Token, pgstore.CreateAnswer{Status: 201, Body: []byte(`{}`)}))
			default:
				replays <- cl
			}
		}()
	}
	wg.Wait()
	close(replays)
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(holders) != 1 || len(replays) != n-1 {
		t.Fatalf("%d holders and %d replays, want 1 and %d", len(holders), len(replays), n-1)
	}
	for r := range replays {
		if r.Replay == nil || r.Replay.Status != 201 {
			t.Fatalf("replay %+v", r)
		}
	}
}

// TestCreatesStaleClaim: a claim left unsettled longer than Stale (its request died) is taken
// over by the next Claim; Store.IdempotencyExpire forgets old keys.
func TestCreatesStaleClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := pgstore.NewCreates(pool)
	st := pgstore.NewStore(pool, pgstore.StoreConfig{})
	k := pgstore.CreateKey{Scope: uuid.NewString(), Route: "POST /v1/things", Key: "k", Hash: []byte("h")}
	dead, err := c.Claim(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE idempotent_creates SET claimed_at = now() - interval '1 hour', created_at = now() - interval '2 days'
		WHERE scope = $1`, k.Scope); err != nil {
		t.Fatal(err)
	}
	taken, err := c.Claim(ctx, k)
	if err != nil || taken.Token == uuid.Nil || taken.Token == dead.Token {
		t.Fatalf("claim of a stale key %+v, %v", taken, err)
	}
	if err := st.IdempotencyExpire(ctx, 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM idempotent_creates WHERE scope = $1`, k.Scope).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d keys left after expiry, %v", left, err)
	}
}
