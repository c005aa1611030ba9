package scheduler

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/dshd/dshd/pkg/registry"
)

// TestE5_GroupFuncSeesEachGroupOnce: Config.GroupFunc is called once per SCHED-2 group, as it
// begins, with the calls the group holds in model order (the pool of consecutive parallel
// calls, or the one exclusive call), and what it returns is applied to the ctx of each of the
// group's prepares: the hook the pre-execute webhook's one request per group rests on (E5).
func TestE5_GroupFuncSeesEachGroupOnce(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var groups [][]string
	wraps := map[int]int{} // group index → prepares whose ctx it wrapped
	cfg := Config{GroupFunc: func(_ context.Context, calls []registry.Input) func(context.Context) context.Context {
		mu.Lock()
		defer mu.Unlock()
		var ids []string
		for _, c := range calls {
			ids = append(ids, c.CallID)
		}
		groups = append(groups, ids)
		g := len(groups) - 1
		return func(ctx context.Context) context.Context {
			mu.Lock()
			wraps[g]++
			mu.Unlock()
			return ctx
		}
	}}
	h := newHarness(t, cfg)
	h.set("x", spec{exclusive: true})
	done := h.start(context.Background(), "p1", "p2", "x", "p3")
	if r := <-done; r.err != nil {
		t.Fatal(r.err)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(groups) != "[[p1 p2] [x] [p3]]" || fmt.Sprint(wraps) != "map[0:2 1:1 2:1]" {
		t.Fatalf("groups %v, prepares wrapped %v", groups, wraps)
	}
}
