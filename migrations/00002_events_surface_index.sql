-- A partial index over the events that DeriveMessages, surface replacement, crash repair and fork
-- look up by type: the surface events and the turn boundaries. It skips the assistant/chunk rows
-- that make up most of a log, so it stays small and costs chunk appends nothing. Queries that use
-- it spell the type list as literals (a parameter cannot prove the index predicate).

-- +goose Up
CREATE INDEX events_session_surface_turns ON events (session_id, seq)
    WHERE type IN ('user/message', 'assistant/message', 'tool/result', 'turn/start', 'turn/end');

-- +goose Down
DROP INDEX events_session_surface_turns;
