package scripted_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dshd/dshd/pkg/llm"
	"github.com/dshd/dshd/pkg/llm/scripted"
)

// recordSleep records the waits asked for and returns at once (or with ctx's error).
type recordSleep struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (r *recordSleep) sleep(ctx context.Context, d time.Duration) error {
	r.mu.Lock()
	r.waits = append(r.waits, d)
	r.mu.Unlock()
	return ctx.Err()
}

func TestProviderFailTimes(t *testing.T) {
	t.Parallel()
	p := scripted.New(scripted.Config{})
	req := history("u:text fail:RATE_LIMIT failtimes:2")
	for attempt := 1; attempt <= 2; attempt++ {
		_, err := p.Stream(context.Background(), req)
		var e *llm.Error
		if !errors.As(err, &e) || e.Code != llm.CodeRateLimit || !e.Retryable {
			t.Fatalf("attempt %d: err %v, want retryable RATE_LIMIT", attempt, err)
		}
	}
	s, err := p.Stream(context.Background(), req)
	if err != nil {
		t.Fatalf("third attempt: %v", err)
	}
	defer s.Close()
	res, err := llm.ReadAll(s)
	if err != nil || res.Finish != llm.FinishStop {
		t.Fatalf("third attempt: finish %q, err %v", res.Finish, err)
	}
	// Another request (a different history) has its own counter.
	if _, err := p.Stream(context.Background(), history("u:text fail:RATE_LIMIT failtimes:2", "a:text", "u:text fail:RATE_LIMIT failtimes:2")); llm.ErrorCode(err) != llm.CodeRateLimit {
		t.Fatalf("other request: err %v, want RATE_LIMIT", err)
	}
}

func TestProviderFailAlways(t *testing.T) {
	t.Parallel()
	p := scripted.New(scripted.Config{})
	for _, code := range []string{llm.CodeServer, llm.CodeQuota, llm.CodeInvalidCredential, llm.CodeContextWindowExceeded} {
		for range 3 {
			if _, err := p.Stream(context.Background(), history("u:fail:"+code)); llm.ErrorCode(err) != code {
				t.Fatalf("fail:%s: err %v", code, err)
			}
		}
	}
}

func TestProviderTransportMidStream(t *testing.T) {
	t.Parallel()
	p := scripted.New(scripted.Config{})
	for _, script := range []string{"tools:2 fail:TRANSPORT", "tools:2 fail:MALFORMED"} {
		s, err := p.Stream(context.Background(), history("u:"+script))
		if err != nil {
			t.Fatal(err)
		}
		res, err := llm.ReadAll(s)
		s.Close()
		if llm.ErrorCode(err) != llm.CodeTransport || len(res.Chunks) == 0 || res.Finish != "" {
			t.Fatalf("%s: %d chunks, finish %q, err %v; want some chunks then TRANSPORT", script, len(res.Chunks), res.Finish, err)
		}
	}
}

func TestProviderLatencyAndDelaysHonourContext(t *testing.T) {
	t.Parallel()
	rec := &recordSleep{}
	p := scripted.New(scripted.Config{SleepFunc: rec.sleep})
	s, err := p.Stream(context.Background(), history("u:text latency:250 chunkdelay:10"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := llm.ReadAll(s)
	if err != nil || res.Finish != llm.FinishStop {
		t.Fatalf("finish %q, err %v", res.Finish, err)
	}
	if rec.waits[0] != 250*time.Millisecond || len(rec.waits) != len(res.Chunks) {
		t.Fatalf("waits %v for %d chunks; want 250ms then 10ms between chunks", rec.waits, len(res.Chunks))
	}

	ctx, cancel := context.WithCancel(context.Background())
	s, err = scripted.New(scripted.Config{}).Stream(ctx, history("u:text chunkdelay:3600000"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := s.Recv(); done <- err }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Recv after cancel: %v, want context.Canceled", err)
	}
}
