// Package eventlog is the append-only session log of SPEC.md B11 (SES rules): the event
// vocabulary and its validation, an in-memory Log that applies every rule without a database,
// the PostgreSQL Store (gapless per-session seq, batches, pages, DeriveMessages, crash repair,
// fork) and the Hub that wakes local subscribers through LISTEN/NOTIFY.
//
// Only this package (among the ones above the store seam) imports pgx; every pgx error is
// translated here into ErrNotFound, ErrConflict, *ValidationError or *ForkError, or wrapped with
// context.
//
// # Appending
//
// An append validates every event on its own first (lossless JSON, surface markers, message
// shapes, known types: SES-1, 2, 3, 6, 8, 9, 12), then assigns seqs by moving the per-session
// counter row in session_counters by n and inserts all rows in the same statement, together with
// one pg_notify('dshd_events', '<session>:<lastSeq>'). The row lock on the counter makes commit
// order equal seq order, so a reader that has everything up to N and asks for seq > N never skips
// a late commit. Batches whose validation depends on the log (a surface replace, SES-3/SES-4, or
// the optional SES-10 checker) first lock the counter row with SELECT ... FOR UPDATE, load what
// they need and validate; nothing is written until validation passed, so a failing append leaves
// the log (and a caller's transaction) unchanged.
//
// # Lock order
//
// The only row lock this package takes is a session's counter row: appends (the UPDATE of the
// single-statement path, or SELECT ... FOR UPDATE on the validating path) and Repair take it for
// one session per transaction. Fork takes no lock on its source: the prefix it copies is
// committed and immutable, and it creates the child's counter row itself. So no transaction
// holds two counter locks and no lock-order cycle is possible. The Hub holds its subscriber mutex
// only to edit or walk the map, never during I/O; its lifecycle mutex serializes Start and Stop.
package eventlog
