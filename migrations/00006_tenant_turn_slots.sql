-- Tenant turn slots make DSHD_TENANT_MAX_TURNS hold: the check of a tenant's running turns and
-- the taking of a session's run lease are one atomic step.
--
-- A tenant has one row per turn it may run at once (slot 0 .. max-1, created on first use). Taking
-- a run lease under the cap claims a free slot with SELECT ... FOR UPDATE SKIP LOCKED, so that
-- concurrent takers of one tenant never wait for each other's commits (each locks another slot;
-- when every free slot is locked, the taker falls back to a wake job), and records the lease
-- (session_id, owner) in it, in the transaction that takes the lease. A slot is free when the
-- lease it records is no longer live: released, expired, or taken over by another owner. So
-- releasing a lease (a turn's last append, a release, a drop) does not touch the slot.

-- +goose Up
CREATE TABLE tenant_turn_slots (
    tenant_id  uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    slot       integer NOT NULL,
    session_id uuid,
    owner      uuid,
    PRIMARY KEY (tenant_id, slot)
);

-- +goose Down
DROP TABLE tenant_turn_slots;
