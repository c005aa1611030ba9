-- API keys record the key that minted them (docs/credentials-and-keys.md, issue 17):
--   api_keys.parent_id: the key whose request created this one (POST /v1/api-keys); NULL for a
--     tenant's first key, a key the server made, and every key created before this migration.
--     Revoking a key revokes its descendants along this column. Keys are deleted only with their
--     tenant; a deleted key's children go with it.
--   api_keys_parent: the children of a key, which the recursive revocation walks.

-- +goose Up
ALTER TABLE api_keys ADD COLUMN parent_id uuid REFERENCES api_keys (id) ON DELETE CASCADE;
CREATE INDEX api_keys_parent ON api_keys (parent_id) WHERE parent_id IS NOT NULL;

-- +goose Down
DROP INDEX api_keys_parent;
ALTER TABLE api_keys DROP COLUMN parent_id;
