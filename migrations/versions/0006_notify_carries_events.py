"""The append's NOTIFY carries the events it committed, when they fit in one payload.

Revision ID: 0006
Revises: 0005
"""
import importlib.util
from pathlib import Path

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A follower in another process learnt of a commit from its NOTIFY (the last position)
    # and then read the events: a round trip, and a statement for PostgreSQL, on every
    # commit and in every other worker, on each cross-worker hop of a turn (the request
    # to its pool's leader, the decision back). Now the payload carries the commit itself
    # when it is small, as JSON: {"p": last position, "e": [[position, stream, version,
    # type, data, metadata, recorded_at in microseconds since the epoch], ...]}. Data and
    # metadata are the stored jsonb (RETURNING), so a reader gets what a read of the table
    # would give. PostgreSQL delivers the notifications of committed transactions in
    # commit order, and commits take positions under the append lock, so a process that
    # holds every event up to a commit's first position may add it without a read
    # (app/eventstore/tail_cache.py). A payload over NOTIFY's limit (8,000 bytes) names
    # the position only, as before; the events are gathered only while their text stays
    # under 6,000 bytes, so a large group costs no more than it did.
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
            last_position bigint;
            stored_data jsonb;
            stored_meta jsonb;
            carried jsonb := '[]'::jsonb;
            carried_size int := 0;
            message text;
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
                    last_position := out_position;
                    IF carried IS NOT NULL THEN
                        carried_size := carried_size + octet_length(ev_stream[ei]) + octet_length(ev_type[ei])
                                        + octet_length(ev_data[ei]) + octet_length(ev_meta[ei]) + 48;
                        IF carried_size > 6000 THEN
                            carried := NULL;   -- too large to carry: this NOTIFY names the position only
                        ELSE
                            carried := carried || jsonb_build_array(jsonb_build_array(
                                out_position, ev_stream[ei], v, ev_type[ei], stored_data, stored_meta,
                                (extract(epoch FROM out_recorded_at) * 1000000)::bigint));
                        END IF;
                    END IF;
                    RETURN NEXT;
                    ei := ei + 1;
                END LOOP;
            END LOOP;
            IF last_position IS NOT NULL THEN
                message := last_position::text;
                IF carried IS NOT NULL THEN
                    message := jsonb_build_object('p', last_position, 'e', carried)::text;
                    IF octet_length(message) >= 7900 THEN   -- NOTIFY refuses 8,000 bytes and more
                        message := last_position::text;
                    END IF;
                END IF;
                PERFORM pg_notify(channel, message);
            END IF;
        END $$""")


def downgrade() -> None:
    # 0004's function, as it was: the payload names the last position only.
    path = Path(__file__).with_name("0004_append_function.py")
    spec = importlib.util.spec_from_file_location("append_function_0004", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    op.execute("DROP FUNCTION agentrm_append(bigint, int, int[], text[], text[], text[], text[], int[], "
               "text[], int[], text)")
    module.upgrade()
