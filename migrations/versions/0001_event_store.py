"""The event store, projection checkpoints and document read models.

Revision ID: 0001
"""
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    # The one append-only log. `position` is the global order readers see; appends take a
    # transaction-scoped advisory lock before drawing it (see app/eventstore/store.py), so
    # positions become visible in increasing order and a tailing reader never skips one.
    op.execute("""
        CREATE TABLE events (
            position     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            stream       text        NOT NULL,
            version      integer     NOT NULL,
            type         text        NOT NULL,
            data         jsonb       NOT NULL,
            metadata     jsonb       NOT NULL DEFAULT '{}'::jsonb,
            recorded_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
            CONSTRAINT events_stream_version UNIQUE (stream, version)
        )""")
    op.execute("CREATE INDEX events_type ON events (type, position)")
    op.execute("CREATE INDEX events_correlation ON events ((metadata->>'correlation'), position)")
    # Nothing is ever updated or deleted: enforce it in the database, not by convention.
    op.execute("""
        CREATE FUNCTION events_are_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'events are append-only (% refused)', TG_OP; END $$""")
    op.execute("""
        CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events
        FOR EACH ROW EXECUTE FUNCTION events_are_immutable()""")
    op.execute("""
        CREATE TABLE projection_checkpoints (
            name      text PRIMARY KEY,
            position  bigint NOT NULL DEFAULT 0
        )""")
    # Document read models: one row per (projection, key), written in the same
    # transaction that moves the projection's checkpoint.
    op.execute("""
        CREATE TABLE read_models (
            projection text  NOT NULL,
            key        text  NOT NULL,
            doc        jsonb NOT NULL,
            PRIMARY KEY (projection, key)
        )""")
    # Provider credentials are secrets: they never enter the immutable log (the log keeps a
    # fingerprint), so they can be rotated and erased.
    op.execute("""
        CREATE TABLE pool_secrets (
            pool     text PRIMARY KEY,
            api_key  text NOT NULL
        )""")
    op.execute("CREATE INDEX read_models_token ON read_models ((doc->>'token_hash')) "
               "WHERE projection = 'agents'")


def downgrade() -> None:
    op.execute("DROP TABLE pool_secrets")
    op.execute("DROP TABLE read_models")
    op.execute("DROP TABLE projection_checkpoints")
    op.execute("DROP TABLE events")
    op.execute("DROP FUNCTION events_are_immutable()")
