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
    # flight waits for the other: in two of the 100-200 ms windows that made a half-rate
    # phase's slowest 1%, an autovacuum worker was on a core for 130 ms and more.
    #
    # Those statistics buy nothing. The log is read by position, stream and type (btree
    # indexes with statistics of their own). Lookups inside a payload are filters on top
    # of those index scans: `data->>'agent_id'` and `doc->>'finished_at'` are expressions
    # the planner estimates with its defaults either way, and a containment (`data @>`)
    # could read the column's statistics, but only to scale rows that the stream and type
    # conditions have already chosen the index for. EXPLAIN of each of these lookups on the
    # load log gives the same plan with and without them. The one indexed expression
    # (`metadata->>'correlation'`) keeps its index's statistics.
    # Target 0 tells ANALYZE to skip the column; the others keep theirs.
    for table, column in PAYLOADS:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} SET STATISTICS 0")


def downgrade() -> None:
    for table, column in PAYLOADS:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} SET STATISTICS -1")
