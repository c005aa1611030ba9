-- The core schema: tenants and their API keys, versioned agent presets, sessions, and the
-- append-only per-session event log.
--
-- Every row carries its tenant; every query filters by it. The per-session counter row in
-- session_counters is what makes seq gapless: an append locks it with
-- UPDATE ... SET last_seq = last_seq + n RETURNING in the appending transaction, so commit order
-- equals seq order (docs/architecture.md section 3).

-- +goose Up
CREATE TABLE tenants (
    id         uuid PRIMARY KEY,
    name       text NOT NULL,
    limits     jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_keys (
    id         uuid PRIMARY KEY,
    tenant_id  uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    key_hash   bytea NOT NULL UNIQUE,   -- SHA-256 of the secret; the secret itself is never stored
    prefix     text NOT NULL,           -- the first characters, to recognise a key in listings
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id);

CREATE TABLE presets (
    id         uuid PRIMARY KEY,
    tenant_id  uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name       text NOT NULL,
    version    integer NOT NULL,        -- the current version
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    deleted_at timestamptz
);
CREATE INDEX presets_tenant_created ON presets (tenant_id, created_at, id);

-- Every update of a preset writes a new version; sessions pin the version they were created with.
CREATE TABLE preset_versions (
    preset_id  uuid NOT NULL REFERENCES presets (id) ON DELETE CASCADE,
    version    integer NOT NULL,
    tenant_id  uuid NOT NULL,
    body       jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (preset_id, version)
);

CREATE TABLE sessions (
    id             uuid PRIMARY KEY,
    tenant_id      uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    preset_id      uuid,
    preset_version integer,
    header         jsonb NOT NULL,     -- SES-16, immutable
    parent_session uuid,
    seed_length    bigint,
    created_at     timestamptz NOT NULL DEFAULT now(),
    deleted_at     timestamptz
);
CREATE INDEX sessions_tenant_created ON sessions (tenant_id, created_at, id);

-- One row per session: the last assigned seq (-1 for an empty log).
CREATE TABLE session_counters (
    session_id uuid PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    last_seq   bigint NOT NULL DEFAULT -1
);

-- The log. data and surface_op are stored as json (not jsonb) to keep the exact bytes that were
-- validated and appended. No foreign key: the counter row, locked by every append, already
-- proves the session exists.
CREATE TABLE events (
    session_id        uuid NOT NULL,
    seq               bigint NOT NULL,
    tenant_id         uuid NOT NULL,
    type              text NOT NULL,
    time              bigint NOT NULL,  -- epoch milliseconds
    data              json NOT NULL,
    surface_op        json,
    source_event_seqs bigint[],
    ignorable         boolean NOT NULL DEFAULT false,
    PRIMARY KEY (session_id, seq)
);

-- +goose Down
DROP TABLE events;
DROP TABLE session_counters;
DROP TABLE sessions;
DROP TABLE preset_versions;
DROP TABLE presets;
DROP TABLE api_keys;
DROP TABLE tenants;
