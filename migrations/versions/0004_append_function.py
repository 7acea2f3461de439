"""One round trip per group commit: the append as a server-side function.

Revision ID: 0004
Revises: 0003
"""
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # The group commit used to be six round trips (BEGIN, the append lock, the current
    # versions, the INSERT, the NOTIFY, COMMIT), all made while the append lock was held, so
    # on a busy machine every one of them waited for the scheduler to run PostgreSQL and
    # then Python again. Here the whole group is one statement, run in its own implicit
    # transaction (or in the caller's). Requests are checked in order, each against the
    # versions the requests before it left; one whose expected version does not match is
    # left out alone and reported, as before. Data and metadata come as JSON text, cast
    # under the lock like the rest: a value jsonb refuses fails the group's statement, and
    # the store retries its requests one by one, so only the culprit fails.
    #
    # Arguments: the append lock's key and the number of requests; one entry per event:
    # the request it belongs to (0-based, ascending), stream, type, data, metadata; one
    # entry per expectation: request (ascending), stream, expected version (-1: the stream
    # must not exist).
    # Rows out: for an appended event (req, position, version, recorded_at); for a refused
    # request one row (req, NULL, actual version, NULL) and `conflict_stream`.
    op.execute("""
        CREATE FUNCTION agentrm_append(lock_key bigint, n_requests int,
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
        BEGIN
            PERFORM pg_advisory_xact_lock(lock_key);
            FOR r IN 0..n_requests - 1 LOOP
                -- Versions are read from the table itself, one index probe each: the rows
                -- this group already inserted are visible to it, so request r sees what
                -- requests 0..r-1 left.
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
                    RETURNING position, recorded_at INTO out_position, out_recorded_at;
                    req := r; out_version := v; conflict_stream := NULL;
                    last_position := out_position;
                    RETURN NEXT;
                    ei := ei + 1;
                END LOOP;
            END LOOP;
            IF last_position IS NOT NULL THEN
                PERFORM pg_notify(channel, last_position::text);
            END IF;
        END $$""")


def downgrade() -> None:
    op.execute("DROP FUNCTION agentrm_append(bigint, int, int[], text[], text[], text[], text[], int[], "
               "text[], int[], text)")
