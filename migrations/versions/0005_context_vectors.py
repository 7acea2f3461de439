"""One embedding per context message, stored compactly, for hybrid retrieval.

Revision ID: 0005
Revises: 0004
"""
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Derived data like context_embeddings: re-embedding rebuilds it. float32 little-endian
    # bytes (1,536 per 384-dimension vector) instead of real[] (whose per-element headers
    # and array parsing cost more on both sides); the indexer reads an agent's rows after
    # the last seq it holds, never the whole table.
    op.execute("""
        CREATE TABLE context_vectors (
            agent_id  text    NOT NULL,
            seq       integer NOT NULL,
            model     text    NOT NULL,
            vector    bytea   NOT NULL,
            PRIMARY KEY (agent_id, seq)
        )""")


def downgrade() -> None:
    op.execute("DROP TABLE context_vectors")
