"""Leader leases: one heartbeat row per pool, renewed by the pool's scheduler.

Revision ID: 0003
Revises: 0002
"""
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Coordination state, not history: rows are overwritten in place on every renewal and
    # nothing replays them, so they live beside the log (app/adapters/leader_lease.py).
    op.execute("""
        CREATE TABLE pool_leaders (
            pool         text        PRIMARY KEY,
            backend_pid  integer     NOT NULL,
            worker       text        NOT NULL,
            expires_at   timestamptz NOT NULL,
            term         bigint      NOT NULL DEFAULT 1,
            -- when this term began, and when the term before it had lapsed: the takeover
            -- time an operator (and the fault tests) read off a failover
            claimed_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
            previous_expires_at timestamptz
        )""")


def downgrade() -> None:
    op.execute("DROP TABLE pool_leaders")
