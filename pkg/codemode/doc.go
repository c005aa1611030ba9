// Package codemode is dshd's code mode (docs/rules.md CODE-1..13, extension E3): the reserved
// `run_code` tool, the TypeScript SDK the model programs against, and the sandbox that runs the
// programs.
//
// # The pieces
//
//   - Runtime is the mount point. Install puts `run_code` into a registry
//     (registry.InstallRunCode); PromptRuntime describes the runtime to prompt assembly, which
//     then adds the `tools:code-only` (order 99) and `tools:sdk` (order 150) sections and checks
//     PRS-4.
//   - The SDK (sdk.go, tstype.go) is rendered from the visible tools' schemas: a fixed block of
//     instructions, then TypeScript declarations. It is byte-identical for an unchanged tool set.
//   - A program is the body of an async TypeScript function. It is stripped to JavaScript in
//     process with esbuild's Go API (strip.go) and run in a fresh QuickJS engine per run
//     (modernc.org/quickjs, pure Go; engine.go) with a memory limit, a CPU-time and a wall-time
//     limit, an output cap and a tool-call cap (Config). The program sees two globals of ours,
//     `tools` and `console`, and `ToolCallError`; there is no require, process, fetch, module
//     loading or timer.
//   - Each binding call (`await tools.x(args)`) is a sub-call through the full tool pipeline
//     (bridge.go): a nested execution whose parent is the run_code execution, scheduled by a
//     sub-scheduler that follows the native SCHED rules with the agent's maxParallelSubCalls,
//     and logged as `tool/code-dispatch-start` / `tool/code-dispatch` through the outer
//     execution's Commit while the program runs (dispatchlog.go).
//
// # Containment
//
// The engine runs in the server process. Its heap is capped (an allocation past the cap throws
// "out of memory" in the program), JavaScript recursion is capped by the engine's stack limit,
// and every entry into JavaScript is bounded by the remaining CPU budget, measured as the CPU
// time of the engine's thread (cpumeter.go); the host side of a run never blocks on the program. The hostile tests (hostile_test.go) cover infinite loops,
// memory bombs, deep recursion in JavaScript, in the parser and in JSON, output floods,
// promises that never settle, tool-call floods and escape attempts. What in-process running
// cannot contain is a defect of the engine itself (it is C translated to Go that manages its
// own memory): a panic is recovered and reported as the `worker-exit` kind, but memory
// corruption would take the process down. Running the engine in a worker subprocess behind the
// same run interface is the next step for tenants that are not trusted.
package codemode
