-- What the hosted operation of a tenant needs from every append (issue 13), kept by the one
-- append statement in the transaction of the events it derives from, so it can never disagree
-- with the log (a batch commits whole or not at all, and is appended exactly once):
--   session_counters.log_bytes: the stored bytes of the session's events (data and surface op),
--     for the tenant's stored-log quota; seeds and forks add the rows they copy.
--   usage_turns: the usage of every turn (eventlog.Usage: tokens, model and tool calls and
--     errors) and its run time, one row per (session, turn), added to by each append that carries
--     some of it. A retried model call adds its llm/retry once; a crash repair's turn/end closes
--     the row; nothing is counted twice because every event is appended once. day is the UTC day
--     the turn started, which GET /v1/usage and the daily token quota group by.
--   webhook_endpoints / webhook_deliveries: a tenant's webhook endpoints, and the outbox of
--     deliveries: an append that ends a turn, asks an approval or leaves the session idle inserts
--     one delivery per subscribed endpoint; the webhook worker delivers them with retries.

-- +goose Up
ALTER TABLE session_counters ADD COLUMN log_bytes bigint NOT NULL DEFAULT 0;
UPDATE session_counters c SET log_bytes = e.bytes
FROM (SELECT session_id, sum(octet_length(data::text) + coalesce(octet_length(surface_op::text), 0)) AS bytes
      FROM events GROUP BY session_id) e
WHERE e.session_id = c.session_id;

CREATE TABLE usage_turns (
    session_id        uuid NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    turn              integer NOT NULL,
    tenant_id         uuid NOT NULL,
    day               date NOT NULL,
    started_at        timestamptz,
    ended_at          timestamptz,
    end_kind          text,
    input_tokens      bigint NOT NULL DEFAULT 0,
    output_tokens     bigint NOT NULL DEFAULT 0,
    cache_read_tokens bigint NOT NULL DEFAULT 0,
    cache_miss_tokens bigint NOT NULL DEFAULT 0,
    reasoning_tokens  bigint NOT NULL DEFAULT 0,
    model_calls       bigint NOT NULL DEFAULT 0,
    tool_calls        bigint NOT NULL DEFAULT 0,
    tool_errors       bigint NOT NULL DEFAULT 0,
    model_errors      bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (session_id, turn)
);
CREATE INDEX usage_turns_tenant_day ON usage_turns (tenant_id, day);

CREATE TABLE webhook_endpoints (
    id          uuid PRIMARY KEY,
    tenant_id   uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    url         text NOT NULL,
    events      text[] NOT NULL,
    secret      bytea NOT NULL,      -- the HMAC signing secret (shown once, at creation)
    description text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now(),
    disabled_at timestamptz
);
CREATE INDEX webhook_endpoints_tenant ON webhook_endpoints (tenant_id) WHERE disabled_at IS NULL;

CREATE TABLE webhook_deliveries (
    id              uuid PRIMARY KEY,
    endpoint_id     uuid NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    tenant_id       uuid NOT NULL,
    event_id        text NOT NULL,   -- the same for every endpoint and every attempt
    event_type      text NOT NULL,
    payload         json NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    delivered_at    timestamptz,
    failed_at       timestamptz,     -- gave up after the last attempt
    last_status     integer,
    last_error      text,
    UNIQUE (endpoint_id, event_id)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at)
    WHERE delivered_at IS NULL AND failed_at IS NULL;
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, created_at);

-- +goose Down
DROP TABLE webhook_deliveries;
DROP TABLE webhook_endpoints;
DROP TABLE usage_turns;
ALTER TABLE session_counters DROP COLUMN log_bytes;
