-- The approvals of each session, one row per approval/asked (docs/events.md, issue 18), so that a
-- lookup reads the pending asks or the one approval it names, never the session's whole approval
-- history (GET /v1/sessions/{id}/approvals, POST .../approvals/{approvalId}).
--   asked_seq: the seq of the approval's approval/asked; decided_seq: of its first
--     approval/decided, null while it is pending.
--   approvals_pending: the pending approvals of a session, in the order they were asked.
-- The rows are kept by a trigger on events, so every writer of the log (the append statement,
-- seeds, forks) keeps them: an approval/asked inserts its row, an approval/decided sets
-- decided_seq of a pending one. The trigger reads one field of the event's data, the approval
-- id (`data->>'id'`): the one JSON path of the schema into approval events, kept equal to
-- eventlog.ApprovalAsked.ID and ApprovalDecided.ID (TestApprovalLookupReadsOnlyPendingAsks).
-- An approval event without an id (a malformed or older log) is stored and left out of the table,
-- never a failed append (TestApprovalTriggerSkipsAnAskWithoutID).
-- Existing logs are read into the table once, below.

-- +goose Up
CREATE TABLE approvals (
    session_id  uuid NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    id          text NOT NULL,
    asked_seq   bigint NOT NULL,
    decided_seq bigint,
    PRIMARY KEY (session_id, id)
);
CREATE INDEX approvals_pending ON approvals (session_id, asked_seq) WHERE decided_seq IS NULL;

-- +goose StatementBegin
CREATE FUNCTION approvals_follow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.type = 'approval/asked' THEN
        INSERT INTO approvals (session_id, id, asked_seq) VALUES (NEW.session_id, NEW.data->>'id', NEW.seq)
        ON CONFLICT (session_id, id) DO NOTHING;
    ELSE
        UPDATE approvals SET decided_seq = NEW.seq
        WHERE session_id = NEW.session_id AND id = NEW.data->>'id' AND decided_seq IS NULL;
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER approvals_follow AFTER INSERT ON events FOR EACH ROW
    WHEN (NEW.type IN ('approval/asked', 'approval/decided') AND NEW.data->>'id' IS NOT NULL)
    EXECUTE FUNCTION approvals_follow();

INSERT INTO approvals (session_id, id, asked_seq)
SELECT DISTINCT ON (e.session_id, e.data->>'id') e.session_id, e.data->>'id', e.seq
FROM events e JOIN sessions s ON s.id = e.session_id
WHERE e.type = 'approval/asked' AND e.data->>'id' IS NOT NULL
ORDER BY e.session_id, e.data->>'id', e.seq;
UPDATE approvals a SET decided_seq = d.seq
FROM (SELECT DISTINCT ON (session_id, data->>'id') session_id, data->>'id' AS id, seq
      FROM events WHERE type = 'approval/decided' ORDER BY session_id, data->>'id', seq) d
WHERE d.session_id = a.session_id AND d.id = a.id AND d.seq > a.asked_seq;

-- +goose Down
DROP TRIGGER approvals_follow ON events;
DROP FUNCTION approvals_follow();
DROP TABLE approvals;
