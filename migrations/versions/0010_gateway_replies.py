"""The gateway's stored replies, by (agent, Idempotency-Key).

Revision ID: 0010
Revises: 0009
"""
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Coordination state beside the log, as pool_leaders: a row is a claim while its first
    # call runs (status NULL), then that call's answer until the window passes. Nothing
    # replays it (app/adapters/pg_gateway_replies.py).
    op.execute("""
        CREATE TABLE gateway_replies (
            agent_id   text        NOT NULL,
            key        text        NOT NULL,
            body_hash  text        NOT NULL,
            -- the claim's token: only the worker running the first call may finish it
            owner      text        NOT NULL,
            status     integer,
            headers    jsonb,
            body       bytea,
            created_at timestamptz NOT NULL,
            -- renewed while the first call runs; a claim silent too long is taken over
            touched_at timestamptz NOT NULL,
            PRIMARY KEY (agent_id, key)
        )""")
    op.execute("CREATE INDEX gateway_replies_created ON gateway_replies (created_at)")


def downgrade() -> None:
    op.execute("DROP TABLE gateway_replies")
