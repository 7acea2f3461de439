"""No planner statistics on the jsonb payloads: events.data, events.metadata, read_models.doc.

Revision ID: 0007
Revises: 0006
"""
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# (table, column) pairs whose statistics no query plan reads.
PAYLOADS = (("events", "data"), ("events", "metadata"), ("read_models", "doc"))


def upgrade() -> None:
    # Autovacuum's ANALYZE samples 30,000 rows of a table and, for each column, sorts and
    # compares the sampled values. For a jsonb payload that means detoasting and comparing
    # 30,000 documents: on `bench load`'s log (134k events) ANALYZE events took 250 ms of
    # one core, 160 ms of it on data and metadata, and ANALYZE read_models 140 ms. On a
    # 2-core machine that is a quarter of a second with one core gone, and every grant in
    # flight waited for the other: the half-rate phases whose P99 doubled had an
    # autovacuum worker busy through their slow 100 ms.
    #
    # Those statistics buy nothing. The log is read by position, stream and type (btree
    # indexes with statistics of their own); the few lookups inside a payload
    # (`data->>'agent_id'`, `doc->>'finished_at'`) are expressions, which the planner
    # estimates with its defaults whether or not the column has statistics, and the one
    # indexed expression (`metadata->>'correlation'`) keeps its index's statistics.
    # Target 0 tells ANALYZE to skip the column; the others keep theirs.
    for table, column in PAYLOADS:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} SET STATISTICS 0")


def downgrade() -> None:
    for table, column in PAYLOADS:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} SET STATISTICS -1")
