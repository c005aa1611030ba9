package scheduler

import (
	"context"

	"github.com/dshd/dshd/pkg/registry"
)

// Pipeline is the tool pipeline as the scheduler sees it: the four stage operations of one call
// plus its classification. *registry.Registry implements it; tests may use a fake.
//
// The scheduler calls ExecutionMode, Prepare, Finalize and Finish only from its ordered lane, one at
// a time and in model order. It calls Dispatch on a goroutine of its own, concurrently with other
// Dispatch calls and with the lane (SCHED-9), so Dispatch must be safe for concurrent use.
//
// The ctx passed to every method is the step signal: "aborted" means ctx.Err() != nil. A method
// that panics is contained by the scheduler (see the package documentation), but a well-behaved
// pipeline converts tool failures into failure results itself and never returns nil.
type Pipeline interface {
	// ExecutionMode classifies a call (REG-9). Called just before the call would start.
	ExecutionMode(in registry.Input) registry.Mode
	// Prepare creates the execution and runs pre-execute, approval and guards. It may block on an
	// approval. Its Kind says whether to Dispatch (PrepDispatch) or to Finish.
	Prepare(ctx context.Context, in registry.Input) *registry.Prepared
	// Dispatch runs the execute wrappers and the body of a PrepDispatch call. It returns only when
	// the body has settled (SCHED-8).
	Dispatch(ctx context.Context, p *registry.Prepared) *registry.Settled
	// Finalize runs post-execute, finalizeContent and tools/result for a dispatched call.
	Finalize(ctx context.Context, s *registry.Settled) *registry.Result
	// Finish completes a PrepPostResult or PrepFinalResult call without dispatching it.
	Finish(ctx context.Context, p *registry.Prepared) *registry.Result
}
