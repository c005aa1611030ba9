-- Idempotency keys of POST /v1/sessions/{id}/messages: the first request with a key stores the
-- hash of its request and the message it created, in the transaction that appends the message;
-- a retry with the same key and request gets the same answer and creates nothing. Keys expire
-- after a day (the worker's sweeper deletes them).

-- +goose Up
CREATE TABLE idempotency_keys (
    tenant_id    uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    key          text NOT NULL,
    request_hash bytea NOT NULL,
    session_id   uuid NOT NULL,
    message_id   text,
    seq          bigint,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);

-- +goose Down
DROP TABLE idempotency_keys;
