-- Wakes of a session without job churn (issue 9, finding 7), on the counter row that every post,
-- append and lease operation already locks:
--   run_wake: a waking message (followup, steer) was posted while the run lease was held. The
--     holder does not give up the lease while it is set: its turn's last append does not release,
--     and a release clears it and tells the holder to serve again. So a post to a busy session
--     enqueues no job: the holder serves it (and, if the holder dies, the lease sweeper's repair).
--     Taking the lease clears it (the new holder serves whatever waits).
--   wake_queued_at: when a wake job of the session was enqueued (or last refused for the tenant's
--     bound) and has not yet run: a post to an idle session it cannot serve at once enqueues a job
--     only when none is queued, so a session has at most one waiting job. A job that runs clears
--     it; a stale one (older than a minute: a job retrying after errors) no longer counts.

-- +goose Up
ALTER TABLE session_counters
    ADD COLUMN run_wake boolean NOT NULL DEFAULT false,
    ADD COLUMN wake_queued_at timestamptz;

-- +goose Down
ALTER TABLE session_counters DROP COLUMN run_wake, DROP COLUMN wake_queued_at;
