// Package eventlog is the session log's vocabulary and seam, and imports only the standard
// library, pkg/llm and pkg/fault (internal/archtest holds it to that):
//
//   - the event envelope (Event, NewEvent, SurfaceOp) and one typed payload per event kind
//     (payload.go), each with its validation; the validation table is built from them (the SES
//     rules of docs/rules.md);
//   - Log, an in-memory log applying every rule, with DeriveMessages (the model-visible history),
//     crash repair's Closers, the SES-10 invariant checker;
//   - the inbox fold (InboxLens, Inbox): the one implementation of splice accounting;
//   - the Journal seam every writer and reader of a session goes through: Append with a build
//     function of the Head, Since, Wait, Latest, and Follow on top of them. MemJournal is the
//     in-memory journal; pkg/pgstore the PostgreSQL one; eventlogtest the conformance suite
//     both pass.
//
// docs/events.md lists every event kind and its payload; docs/architecture.md tells how the log
// is written and followed.
package eventlog
