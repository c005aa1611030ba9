-- dshd_post_idle posts to an idle session in one statement (issue 20: a post was six statements
-- and as many round trips). It is pgstore.Store.Post's fast path for a post that offers to take
-- the run lease. An idle session (both inbox lists empty, no run lease recorded; with p_runnable,
-- a preset) is the one case where what a post appends does not depend on the log's head beyond
-- its seqs (the splice inserts at index 0), so the caller builds the batch without reading the
-- head and the seqs are given here, after the log's last (p_expect, when not null, must be it):
--   * the session's counter row is updated first (its lock is taken before a slot's, as the
--     general path takes them), under the conditions above; when they do not hold nothing is
--     written and every output is null: the caller posts the general way;
--   * a free turn slot of the tenant is claimed (p_max > 0), each statement with a fresh snapshot
--     (READ COMMITTED, a volatile function), so a slot a taker committed a moment ago is seen
--     taken, as in takeLease; with no free slot the function raises SQLSTATE DS001, which rolls
--     the statement back, and the caller posts the general way (which enqueues a wake job);
--   * the events are inserted and the commit is notified, as the append statement does.
-- The inbox starts empty, so the lengths and message sizes after the batch are given whole.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION dshd_post_idle(p_session uuid, p_tenant uuid, p_expect bigint,
    p_times bigint[], p_types text[], p_datas text[], p_ops text[], p_srcs text[], p_ign bool[],
    p_turn int, p_step int, p_turn_sizes int[], p_step_sizes int[], p_bytes bigint,
    p_owner uuid, p_ttl_ms bigint, p_max int, p_from int, p_runnable bool,
    OUT last_seq bigint, OUT preset_id uuid, OUT preset_version int, OUT lease_until timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    v_slot int;
    v_tried int[] := '{}';
    v_claimed bool := false;
BEGIN
    UPDATE session_counters sc SET last_seq = sc.last_seq + cardinality(p_types),
        inbox_next_turn = p_turn, inbox_next_step = p_step,
        inbox_next_turn_sizes = p_turn_sizes, inbox_next_step_sizes = p_step_sizes,
        log_bytes = sc.log_bytes + p_bytes,
        run_owner = p_owner, run_lease_until = now() + p_ttl_ms * interval '1 millisecond', run_wake = false
    FROM sessions s
    WHERE sc.session_id = p_session AND s.id = p_session AND s.tenant_id = p_tenant AND s.deleted_at IS NULL
      AND (s.preset_id IS NOT NULL OR NOT p_runnable) AND (p_expect IS NULL OR sc.last_seq = p_expect)
      AND sc.inbox_next_turn = 0 AND sc.inbox_next_step = 0 AND sc.run_owner IS NULL
    RETURNING sc.last_seq, s.preset_id, COALESCE(s.preset_version, 0), sc.run_lease_until
    INTO last_seq, preset_id, preset_version, lease_until;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF p_max > 0 THEN
        FOR i IN 1..8 LOOP
            -- The slot the caller drew is tried alone first: with few of the tenant's turns
            -- running it is free, and one row is read instead of every slot.
            IF i = 1 THEN
                SELECT t.slot INTO v_slot FROM tenant_turn_slots t
                WHERE t.tenant_id = p_tenant AND t.slot = p_from
                  AND NOT EXISTS (SELECT 1 FROM session_counters h
                      WHERE h.session_id = t.session_id AND h.run_owner = t.owner AND h.run_lease_until > now())
                FOR UPDATE OF t SKIP LOCKED;
            END IF;
            IF i > 1 OR NOT FOUND THEN
                SELECT t.slot INTO v_slot FROM tenant_turn_slots t
                WHERE t.tenant_id = p_tenant AND t.slot < p_max AND NOT t.slot = ANY (v_tried)
                  AND NOT EXISTS (SELECT 1 FROM session_counters h
                      WHERE h.session_id = t.session_id AND h.run_owner = t.owner AND h.run_lease_until > now())
                ORDER BY (t.slot + p_from) % p_max LIMIT 1 FOR UPDATE OF t SKIP LOCKED;
                IF NOT FOUND THEN
                    EXIT;
                END IF;
            END IF;
            UPDATE tenant_turn_slots t SET session_id = p_session, owner = p_owner
            WHERE t.tenant_id = p_tenant AND t.slot = v_slot
              AND NOT EXISTS (SELECT 1 FROM session_counters h
                  WHERE h.session_id = t.session_id AND h.run_owner = t.owner AND h.run_lease_until > now());
            IF FOUND THEN
                v_claimed := true;
                EXIT;
            END IF;
            v_tried := v_tried || v_slot;
        END LOOP;
        IF NOT v_claimed THEN
            RAISE EXCEPTION 'dshd_post_idle: no free turn slot' USING ERRCODE = 'DS001';
        END IF;
    END IF;
    INSERT INTO events (session_id, seq, tenant_id, type, time, data, surface_op, source_event_seqs, ignorable)
    SELECT p_session, last_seq - cardinality(p_types) + u.ord, p_tenant, u.type, u.time, u.data::json, u.op::json, u.src::bigint[], u.ign
    FROM unnest(p_types, p_datas, p_ops, p_srcs, p_ign, p_times) WITH ORDINALITY AS u(type, data, op, src, ign, time, ord);
    PERFORM pg_notify('dshd_events', p_session::text || ':' || last_seq);
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION dshd_post_idle(uuid, uuid, bigint, bigint[], text[], text[], text[], text[], bool[],
    int, int, int[], int[], bigint, uuid, bigint, int, int, bool);
