-- Tenant webhook signing secrets encrypted at rest with the operator's key encryption keys
-- (DSHD_CREDENTIAL_KEYS, pkg/secretbox), as tenant credentials are: with kek_id set, secret is the
-- ciphertext of the signing secret under a data key that wrapped_key holds wrapped by key kek_id.
-- Without a keyring the secret stays as it is (kek_id null); `dshd rewrap-credentials` seals such
-- rows once a keyring is configured, and moves sealed ones to the active key.

-- +goose Up
ALTER TABLE webhook_endpoints ADD COLUMN kek_id text, ADD COLUMN wrapped_key bytea;

-- +goose Down
ALTER TABLE webhook_endpoints DROP COLUMN kek_id, DROP COLUMN wrapped_key;
