"""Small statistics samples for the log and the read models: a target of 10, not 100.

Revision ID: 0008
Revises: 0007
"""
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

TARGET = 10
# The columns ANALYZE still gathers after 0007, and the expression indexes (whose
# expression has statistics of its own): every one of them, because ANALYZE samples
# 300 x the largest target among them.
COLUMNS = (("events", "position"), ("events", "stream"), ("events", "version"), ("events", "type"),
           ("events", "recorded_at"), ("read_models", "projection"), ("read_models", "key"))
EXPRESSION_INDEXES = ("events_correlation", "read_models_token")


def upgrade() -> None:
    # After 0007 an ANALYZE of `bench load`'s log (334k events) still took 180-220 ms of one
    # core, and of its read models (66k documents) 140-190 ms, almost all of it reading and
    # sorting the 30,000-row sample the default target of 100 asks for. Autovacuum runs
    # them about once a minute under that load, and on a 2-core machine each one took a
    # core away: in one of three half-rate phases of a probe, the slowest 1% of grants fell
    # in the quarter second of an ANALYZE of the log. At a target of 10 (a 3,000-row
    # sample) each takes 14 ms.
    #
    # The plans do not need more. The log is read by position ranges (for a range past the
    # histogram's end the planner probes the index anyway), by stream and by type, and the
    # read models by projection and key. On that log, EXPLAIN of 42 reads of the log (every
    # filter the store builds, at three positions, with common and rare types and streams)
    # and of the read models' 7 gave the same plans at target 10 as at 100. The one change:
    # a lookup by token hash (no query of the service makes it; agents are authenticated
    # from memory) uses its index by an index scan instead of a bitmap scan.
    for table, column in COLUMNS:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} SET STATISTICS {TARGET}")
    for index in EXPRESSION_INDEXES:
        op.execute(f"ALTER INDEX {index} ALTER COLUMN 1 SET STATISTICS {TARGET}")


def downgrade() -> None:
    for table, column in COLUMNS:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} SET STATISTICS -1")
    for index in EXPRESSION_INDEXES:
        op.execute(f"ALTER INDEX {index} ALTER COLUMN 1 SET STATISTICS -1")
