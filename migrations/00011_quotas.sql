-- Tenant quotas and rate limits (issue 13, docs/usage-and-quotas.md). The limits themselves are
-- tenants.limits (migration 00001: a JSON object of tenant.Limits, null fields taking the
-- server's defaults); this adds the state the shared request limiter keeps.
--
-- tenant_rates: one row per tenant with a request rate, the state of a GCRA limiter shared by
-- every replica: tat_us is the theoretical arrival time (microseconds since the epoch on the
-- database's clock), at_us the time of the last decision and allowed its outcome. Each request is
-- one upsert that decides and records atomically under the row's lock (pgstore.Quotas.RateTake).
--
-- sessions_tenant_live: the live sessions of a tenant, for its session and stored-bytes quotas.

-- +goose Up
CREATE TABLE tenant_rates (
    tenant_id uuid PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
    tat_us    bigint NOT NULL,
    at_us     bigint NOT NULL,
    allowed   boolean NOT NULL
);
CREATE INDEX sessions_tenant_live ON sessions (tenant_id) WHERE deleted_at IS NULL;

-- +goose Down
DROP INDEX sessions_tenant_live;
DROP TABLE tenant_rates;
