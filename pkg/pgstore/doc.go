// Package pgstore is the PostgreSQL adapter: the only package with SQL and the only one that
// imports pgx or River's drivers. It holds the session store and its journal (one append statement
// over a params struct, fenced by the run lease), leases, forks, posting with idempotency keys,
// the River queue of wake jobs, the LISTEN/NOTIFY hub, and the preset and tenant stores. pgx
// errors are translated here into the application's errors (pkg/fault; eventlog.ErrNotFound,
// eventlog.ErrConflict, *eventlog.ValidationError, *ForkError); nothing above inspects one.
//
// # Appending
//
// An append validates every event on its own first (eventlog.Prepare), stamps the batch for the
// head it was built on, checks what needs the log (sources earlier, a surface replacement, the
// inbox fit), then moves the per-session counter row by n and inserts all rows in one statement
// with one pg_notify('dshd_events', '<session>:<lastSeq>'), conditioned on the log still ending at
// the head and, for a runner, on its lease. The row lock on the counter makes commit order equal
// seq order, so a reader that has everything up to N and asks for seq > N never skips a late
// commit. A journal that does not know the head yet locks the counter row, reads the head and
// appends in one transaction.
//
// # Lock order
//
// The only row lock this package takes is a session's counter row (appends, lease statements,
// posts), one session per transaction. Fork takes no lock on its source: the prefix it copies is
// committed and immutable, and it creates the child's counter row itself. So no transaction holds
// two counter locks and no lock-order cycle is possible. The Hub holds its subscriber mutex only
// to edit or walk the map, never during I/O; its lifecycle mutex serializes Start and Stop.
// Creating an API key or a tenant credential (Credentials, the envelope-encrypted store of
// tenants' model keys) also locks its tenant's row, to count the tenant's keys or credentials,
// alone in its transaction: no counter lock is held with it.
package pgstore
