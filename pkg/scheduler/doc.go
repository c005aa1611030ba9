// Package scheduler runs one assistant step's tool calls (docs/rules.md SCHED-1 to SCHED-9).
//
// The scheduler owns ordering and concurrency; the tool pipeline (pkg/registry) owns everything
// that happens to one call. It never imports the session log: it reports through an [Emitter]
// that the agent loop implements with durable appends, so it is tested without a database.
//
// # The lane
//
// RunStep's own goroutine is the ordered lane. Everything order-sensitive runs there, one thing at
// a time, in model order: classification, `tool/call` emission, the prepare stage (pre-execute,
// approval, guards), the finalize / finish stage (post-execute) and every emitter call. Only the
// dispatch stage (wrappers plus body) runs on its own goroutine, one per dispatched call. A
// dispatch goroutine touches nothing but its own slot, and hands the slot back to the lane over a
// buffered channel (which never blocks the sender); the channel receive is the only
// synchronisation, so the scheduler takes no locks.
//
// # Groups
//
// Calls are split into groups in model order (SCHED-2). An exclusive call is a group of one: it
// starts only after everything before it has committed, and nothing after it starts before it has
// committed. Consecutive parallel calls share a rolling pool: a new call starts whenever fewer than
// the cap are in flight (dispatched and not yet settled); a settled call no longer counts, even if
// it is still waiting for an earlier call to commit.
//
// # Commit cursor
//
// Results commit strictly in model order (SCHED-4). Before every start and while waiting, the lane
// commits every settled call at the head of the queue: finalize or finish, `tool/result`, then the
// call's additionalContexts. A fast later call therefore waits behind a slow earlier one, and the
// log interleaves `tool/call` and `tool/result` events (SCHED-5) while the results stay in order.
//
// # Abort and failure
//
// The step signal is the ctx passed to RunStep. It is checked before every start, which covers
// "after each start and after each commit" (SCHED-6). Once it is cancelled no call starts; started
// calls are drained and committed in order; every call that never started gets a synthetic
// `tool/call` plus an ABORTED_BEFORE_DISPATCH `tool/result`. An internal failure (an emitter error,
// a pipeline contract violation, an invalid cap, a bug in the scheduler) stops new starts, drains
// started calls and is returned; no synthetic results are written (SCHED-7). A started body is
// never abandoned (SCHED-8), and a panic in any pipeline stage becomes a failure result whose stack
// goes to the injected logger.
package scheduler
