"""Embeddings of cold-tier chunks, computed off the request path.

Revision ID: 0002
Revises: 0001
"""
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Derived data (a pure function of the chunk text and the model), so it lives beside
    # the log, not in it: rebuilding it is re-embedding, and replay never depends on it.
    op.execute("""
        CREATE TABLE context_embeddings (
            agent_id   text    NOT NULL,
            chunk_id   text    NOT NULL,
            model      text    NOT NULL,
            embedding  real[]  NOT NULL,
            PRIMARY KEY (agent_id, chunk_id)
        )""")


def downgrade() -> None:
    op.execute("DROP TABLE context_embeddings")
