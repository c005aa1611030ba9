-- The request limiter sheds load, and usage pages seek (issue 13, docs/usage-and-quotas.md).
--
-- tenant_rates becomes UNLOGGED: the limiter's state is a few microseconds of a tenant's recent
-- past, not worth a WAL record and a flush per request. After a crash of PostgreSQL (or on a
-- promoted standby) the table is empty, which gives every tenant a full burst once. An allowed
-- request updates tat_us and at_us (now the time of the last allowed request); a refused one
-- writes nothing (pgstore.Quotas.RateTake). allowed is no longer read: it stays, always true, for
-- replicas of the previous version during a rolling upgrade.
--
-- usage_turns_tenant_start: the turns of a tenant in the order of GET /v1/usage?groupBy=turn
-- (their start, UTC midnight of their day when they have none), so a page seeks to its cursor
-- and reads only its rows. usage_turns_tenant_session: the turns of a tenant by session, so a
-- page of groupBy=session aggregates its sessions only.

-- +goose Up
ALTER TABLE tenant_rates SET UNLOGGED;
CREATE INDEX usage_turns_tenant_start ON usage_turns
    (tenant_id, (coalesce(started_at, day::timestamp AT TIME ZONE 'UTC')), session_id, turn);
CREATE INDEX usage_turns_tenant_session ON usage_turns (tenant_id, session_id, day);

-- +goose Down
DROP INDEX usage_turns_tenant_session;
DROP INDEX usage_turns_tenant_start;
ALTER TABLE tenant_rates SET LOGGED;
