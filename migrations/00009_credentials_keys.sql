-- Hosted operations, part one: API keys with names, scopes, expiry and last use, and tenant model
-- credentials encrypted at rest (docs/credentials-and-keys.md).
--
-- An API key row is rotated in place (a new key_hash and prefix; the old secret stops working at
-- once) and revoked by setting revoked_at. last_used_at is written at most once a minute per key.
--
-- A credential's secret is envelope-encrypted (pkg/secretbox): ciphertext is the secret under
-- the credential's own data key, wrapped_key is that data key wrapped by the operator's key
-- encryption key kek_id. Both are bound to the tenant and the credential id, so a row copied to
-- another tenant does not decrypt. Rotating the operator key rewrites kek_id and wrapped_key only.

-- +goose Up
ALTER TABLE api_keys
    ADD COLUMN name         text NOT NULL DEFAULT 'default',
    ADD COLUMN scopes       text[] NOT NULL DEFAULT '{read,write}',
    ADD COLUMN expires_at   timestamptz,
    ADD COLUMN last_used_at timestamptz,
    ADD COLUMN rotated_at   timestamptz;

CREATE TABLE credentials (
    id          uuid PRIMARY KEY,
    tenant_id   uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name        text NOT NULL,
    provider    text NOT NULL,
    kek_id      text NOT NULL,
    wrapped_key bytea NOT NULL,
    ciphertext  bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, name)
);
CREATE INDEX credentials_kek ON credentials (kek_id);

-- +goose Down
DROP TABLE credentials;
ALTER TABLE api_keys
    DROP COLUMN name,
    DROP COLUMN scopes,
    DROP COLUMN expires_at,
    DROP COLUMN last_used_at,
    DROP COLUMN rotated_at;
