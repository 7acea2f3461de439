"""The append's NOTIFY carries every commit's events, in as many payloads as they need.

Revision ID: 0008
Revises: 0007
"""
import importlib.util
from pathlib import Path

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Migration 0006 carried a commit's events in its NOTIFY only when all of them fit in one
    # payload (under 6,000 bytes of text); a larger commit named its last position, and every
    # follower in every other worker read the log for it. Under load most group commits are
    # larger than that (a probe at 240 turns/s: a worker's followers read the log on 19-event
    # gaps, about one read per commit of the other worker). Now the events go out in chunks of
    # at most 6,000 bytes, each its own NOTIFY in the same format as before ({"p": the chunk's
    # last position, "e": its events}), in position order. A transaction's notifications are
    # delivered together, in order, at its commit, so a chunk whose first position follows
    # what a process holds extends its tail cache as a whole commit would: its positions are
    # committed, consecutive, and nothing else can take them (app/eventstore/tail_cache.py).
    # An event too large for any payload (a long context message) is named by its position
    # alone, as before; the chunks after it wait in the tail cache for the read it causes.
    # A chunk whose JSON came out over NOTIFY's limit (jsonb's text is a little longer than
    # the text measured) names its last position only.
    op.execute("""
        CREATE OR REPLACE FUNCTION agentrm_notify_chunk(channel text, last bigint, events jsonb)
        RETURNS void LANGUAGE plpgsql AS $$
        DECLARE
            message text := jsonb_build_object('p', last, 'e', events)::text;
        BEGIN
            IF octet_length(message) >= 7900 THEN   -- NOTIFY refuses 8,000 bytes and more
                message := last::text;
            END IF;
            PERFORM pg_notify(channel, message);
        END $$""")
    op.execute("""
        CREATE OR REPLACE FUNCTION agentrm_append(lock_key bigint, n_requests int,
                                                  ev_req int[], ev_stream text[], ev_type text[], ev_data text[],
                                                  ev_meta text[], ex_req int[], ex_stream text[], ex_version int[],
                                                  channel text)
        RETURNS TABLE (req int, out_position bigint, out_version int, out_recorded_at timestamptz,
                       conflict_stream text)
        LANGUAGE plpgsql AS $$
        DECLARE
            ne int := coalesce(array_length(ev_req, 1), 0);
            nx int := coalesce(array_length(ex_req, 1), 0);
            ei int := 1;
            xi int := 1;
            r int;
            v int;
            bad text;
            bad_version int;
            stored_data jsonb;
            stored_meta jsonb;
            chunk jsonb := '[]'::jsonb;
            chunk_size int := 0;
            chunk_last bigint;
            event_size int;
        BEGIN
            PERFORM pg_advisory_xact_lock(lock_key);
            FOR r IN 0..n_requests - 1 LOOP
                bad := NULL;
                WHILE xi <= nx AND ex_req[xi] = r LOOP
                    IF bad IS NULL THEN
                        SELECT coalesce(max(e.version), -1) INTO v FROM events e WHERE e.stream = ex_stream[xi];
                        IF v <> ex_version[xi] THEN
                            bad := ex_stream[xi];
                            bad_version := v;
                        END IF;
                    END IF;
                    xi := xi + 1;
                END LOOP;
                IF bad IS NOT NULL THEN
                    req := r; out_position := NULL; out_version := bad_version;
                    out_recorded_at := NULL; conflict_stream := bad;
                    RETURN NEXT;
                    WHILE ei <= ne AND ev_req[ei] = r LOOP
                        ei := ei + 1;
                    END LOOP;
                    CONTINUE;
                END IF;
                WHILE ei <= ne AND ev_req[ei] = r LOOP
                    SELECT coalesce(max(e.version), -1) + 1 INTO v FROM events e WHERE e.stream = ev_stream[ei];
                    INSERT INTO events (stream, version, type, data, metadata)
                    VALUES (ev_stream[ei], v, ev_type[ei], ev_data[ei]::jsonb, ev_meta[ei]::jsonb)
                    RETURNING position, recorded_at, data, metadata
                    INTO out_position, out_recorded_at, stored_data, stored_meta;
                    req := r; out_version := v; conflict_stream := NULL;
                    event_size := octet_length(ev_stream[ei]) + octet_length(ev_type[ei])
                            + octet_length(ev_data[ei]) + octet_length(ev_meta[ei]) + 48;
                    IF event_size > 6000 THEN
                        -- too large to carry: what is gathered goes first, then this one's position
                        IF chunk_last IS NOT NULL THEN
                            PERFORM agentrm_notify_chunk(channel, chunk_last, chunk);
                        END IF;
                        PERFORM pg_notify(channel, out_position::text);
                        chunk := '[]'::jsonb; chunk_size := 0; chunk_last := NULL;
                    ELSE
                        IF chunk_size + event_size > 6000 THEN
                            PERFORM agentrm_notify_chunk(channel, chunk_last, chunk);
                            chunk := '[]'::jsonb; chunk_size := 0;
                        END IF;
                        chunk := chunk || jsonb_build_array(jsonb_build_array(
                            out_position, ev_stream[ei], v, ev_type[ei], stored_data, stored_meta,
                            (extract(epoch FROM out_recorded_at) * 1000000)::bigint));
                        chunk_size := chunk_size + event_size;
                        chunk_last := out_position;
                    END IF;
                    RETURN NEXT;
                    ei := ei + 1;
                END LOOP;
            END LOOP;
            IF chunk_last IS NOT NULL THEN
                PERFORM agentrm_notify_chunk(channel, chunk_last, chunk);
            END IF;
        END $$""")


def downgrade() -> None:
    # 0006's function, as it was: one payload per commit, the events only when they all fit.
    path = Path(__file__).with_name("0006_notify_carries_events.py")
    spec = importlib.util.spec_from_file_location("notify_carries_events_0006", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.upgrade()
    op.execute("DROP FUNCTION agentrm_notify_chunk(text, bigint, jsonb)")
