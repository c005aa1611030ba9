-- API keys: the `keys` scope, which managing API keys (POST /v1/api-keys, rotate, revoke) needs
-- from now on (docs/credentials-and-keys.md). Keys that could write could manage keys before:
-- they keep that power, so that no tenant is locked out of its keys by the upgrade. New keys get
-- read and write unless they ask for keys, and never a scope or a lifetime beyond the key that
-- creates them.

-- +goose Up
UPDATE api_keys SET scopes = ARRAY(SELECT DISTINCT s FROM unnest(array_append(scopes, 'keys')) AS s ORDER BY s)
    WHERE 'write' = ANY (scopes) AND NOT ('keys' = ANY (scopes));

-- +goose Down
UPDATE api_keys SET scopes = array_remove(scopes, 'keys');
