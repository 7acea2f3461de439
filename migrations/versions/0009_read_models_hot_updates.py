"""Read models: drop the unused token index, so that a document's update can be HOT; and
compress large documents with lz4 where the server has it.

Revision ID: 0009
Revises: 0008
"""
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # `read_models_token` indexed doc->>'token_hash' of the agents' documents. No query of
    # the service reads it (agents are authenticated from the in-memory token index), yet
    # an index whose expression reads `doc` makes every update of every document, of any
    # projection, a non-HOT update: a new entry in the primary key's index too, and more for
    # vacuum to clean. The periodic save rewrites about a thousand documents a second under
    # `bench load`; on a copy of its shape (860 agents updated, 640 turns inserted, in chunks
    # of 100) a save took 42-45 ms of the backend with the index and 34-38 ms without,
    # 43% of the updates HOT instead of none.
    op.execute("DROP INDEX IF EXISTS read_models_token")
    # The pool's scheduler document (about 300 KB at 1,000 agents) is rewritten at every
    # save; lz4 writes it in 7.3 ms where the default pglz takes 9.9 ms, for a slightly
    # larger value (69 KB against 63 KB). Only values written from now on change.
    op.execute("""
        DO $$ BEGIN
            IF EXISTS (SELECT 1 FROM pg_settings
                       WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)) THEN
                ALTER TABLE read_models ALTER COLUMN doc SET COMPRESSION lz4;
            END IF;
        END $$""")


def downgrade() -> None:
    op.execute("ALTER TABLE read_models ALTER COLUMN doc SET COMPRESSION default")
    op.execute("CREATE INDEX read_models_token ON read_models ((doc->>'token_hash')) "
               "WHERE projection = 'agents'")
    op.execute("ALTER INDEX read_models_token ALTER COLUMN 1 SET STATISTICS 10")
