// Package promptasm assembles and renders the system prompt of one model step (docs/rules.md
// PRM-1 to PRM-10, and the presentation hooks of PRS-3 and PRS-4).
//
// A Registry holds prompt registrations in layers: the global layer (scope key "") and one layer
// per scope key. Registrations are sections (ordered prompt text), runtime-context entries (text
// that goes into a user-role snapshot message instead of the system prompt, PRM-9), variables
// (`{{name}}` values), tool providers, runtime-context suppressors and assemble listeners. Every
// registration returns an idempotent disposer.
//
// Assemble builds one Assembly for a scope chain (farthest to nearest scope), orders the tools,
// runs the assemble waterfall, enforces a complete section and context suppression, and renders:
// strict `{{name}}` interpolation, empty sections dropped, the rest joined by a blank line. Every
// failure of Assemble is an *AssemblyError, so the agent loop can end the turn with an error and
// no step (PRM-8).
//
// A Snapshotter, one per agent, decides when a new runtime-context snapshot message must be
// appended to the history (PRM-9).
package promptasm
