-- The pending bytes of the inbox (issue 9, finding 2), on the counter row next to the inbox
-- lengths, so that a post checks the session's inbox bound (DSHD_INBOX_MAX_MESSAGES and
-- DSHD_INBOX_MAX_BYTES) under the counter row lock, without reading the log:
--   inbox_next_turn_sizes, inbox_next_step_sizes: the size in bytes (of its JSON in the splice) of
--     every message waiting in each list, in list order; their sum is the pending bytes. The one
--     append statement keeps them in step with the lengths: a splice inserts at the end and
--     deletes from the front (what every writer does; another splice keeps the count exact and
--     the sizes approximate), so an append turns a list into (sizes || inserted)[removed + 1:].
--     A seed or fork recomputes them from the splices, as it does the lengths.
-- Sessions with messages already waiting get sizes of 0 for them (unknown until they are served).

-- +goose Up
ALTER TABLE session_counters
    ADD COLUMN inbox_next_turn_sizes integer[] NOT NULL DEFAULT '{}',
    ADD COLUMN inbox_next_step_sizes integer[] NOT NULL DEFAULT '{}';
UPDATE session_counters SET
    inbox_next_turn_sizes = array_fill(0, ARRAY[inbox_next_turn]),
    inbox_next_step_sizes = array_fill(0, ARRAY[inbox_next_step])
WHERE inbox_next_turn > 0 OR inbox_next_step > 0;

-- +goose Down
ALTER TABLE session_counters DROP COLUMN inbox_next_turn_sizes, DROP COLUMN inbox_next_step_sizes;
