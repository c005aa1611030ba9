-- Turn execution state on the per-session counter row, which every append already locks:
--   run_owner, run_lease_until: the lease of the worker running the session's turns. At most one
--     worker holds it; its appends are fenced by it, so a runner that lost it writes nothing.
--   inbox_next_turn, inbox_next_step: the lengths of the durable inbox (LOOP-1), kept up to date
--     by every append of an agent/inbox/spliced event, so an HTTP handler can insert at the end of
--     a list without replaying the log, and a lease is released only when no followup waits.

-- +goose Up
ALTER TABLE session_counters
    ADD COLUMN run_owner uuid,
    ADD COLUMN run_lease_until timestamptz,
    ADD COLUMN inbox_next_turn integer NOT NULL DEFAULT 0,
    ADD COLUMN inbox_next_step integer NOT NULL DEFAULT 0;
CREATE INDEX session_counters_leases ON session_counters (run_lease_until) WHERE run_owner IS NOT NULL;

-- +goose Down
DROP INDEX session_counters_leases;
ALTER TABLE session_counters
    DROP COLUMN run_owner, DROP COLUMN run_lease_until,
    DROP COLUMN inbox_next_turn, DROP COLUMN inbox_next_step;
