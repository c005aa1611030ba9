-- Idempotency keys of the POSTs that create a resource (sessions and forks, presets, API keys,
-- credentials, webhooks, stream tokens, tenants): docs/errors-and-idempotency.md. A request with
-- a key first claims it (a row without status); the one that claimed it creates the resource and
-- records the answer it gave (status and body, a secret it carried removed), or drops the claim
-- when it failed. Another request with the key waits for the claim to settle and replays the
-- answer. scope is the tenant's id, or 'admin' for the operator's tenant creation; there is no
-- foreign key, so a tenant's rows go with the day's expiry (the worker's sweeper).

-- +goose Up
CREATE TABLE idempotent_creates (
    scope        text NOT NULL,
    route        text NOT NULL,
    key          text NOT NULL,
    request_hash bytea NOT NULL,
    claim        uuid NOT NULL,
    claimed_at   timestamptz NOT NULL DEFAULT now(),
    status       int,
    body         bytea,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, route, key)
);
CREATE INDEX idempotent_creates_created ON idempotent_creates (created_at);

-- +goose Down
DROP TABLE idempotent_creates;
