package api_test

import (
	"fmt"
	"testing"
)

// BenchmarkSessionCreateIdempotent measures what an Idempotency-Key costs a create: a session
// created without a key, with a fresh key (claim, create, record), and the replay of a key
// (claim finds the record).
//
//	go test -run '^$' -bench SessionCreateIdempotent -benchtime 300x ./api
func BenchmarkSessionCreateIdempotent(b *testing.B) {
	e := newEnv(b)
	pid := e.presetCreate(b, e.keyA, minimalPreset)
	body := fmt.Sprintf(`{"presetId":%q}`, pid)
	b.Run("no-key", func(b *testing.B) {
		for range b.N {
			e.do(b, "POST", "/v1/sessions", e.keyA, body).want(b, 201)
		}
	})
	b.Run("fresh-key", func(b *testing.B) {
		for i := range b.N {
			e.do(b, "POST", "/v1/sessions", e.keyA, body, "Idempotency-Key", fmt.Sprintf("bench-%d", i)).want(b, 201)
		}
	})
	e.do(b, "POST", "/v1/sessions", e.keyA, body, "Idempotency-Key", "bench-replay").want(b, 201)
	b.Run("replay", func(b *testing.B) {
		for range b.N {
			e.do(b, "POST", "/v1/sessions", e.keyA, body, "Idempotency-Key", "bench-replay").want(b, 201)
		}
	})
}
